"""The lean decoding loop (haldet.backends.hf.decode) against transformers' `generate`, on the embedded model.

Greedy answers must be identical token for token (the speed path is not allowed to change answers), with the same
log-probs; early stops and first-token P(True) must read exactly what the full paths read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from haldet.backends.hf import decode as decode_module
from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.padding import padded_group
from haldet.backends.hf.pool import common_prefix
from haldet.backends.hf.pool_budget import KV_POOL_BYTES
from haldet.errors import HaldetError
from haldet.text.confidence import confidence_complete, confidence_statement, parse_confidence
from haldet.util.threads import available_cores, cgroup_cpu_limit, thread_count

QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?",
             "Name the largest planet of the solar system and say why it is so large.",
             "How many legs does a spider have?"]


@pytest.fixture(scope="module")
def backends() -> dict[str, HFBackend]:
    lean = HFBackend("smollm2-135m", device="cpu")
    reference = HFBackend("smollm2-135m", device="cpu", decoder="transformers")
    reference._model = lean.model  # same weights, loaded once
    reference.stop_ids = lean.stop_ids
    return {"haldet": lean, "transformers": reference}


@pytest.fixture(scope="module")
def prompts(backends: dict[str, HFBackend]) -> list[str]:
    return [backends["haldet"].render_chat([{"role": "system", "content": "Answer with one word."},
                                            {"role": "user", "content": q}]) for q in QUESTIONS]


@pytest.fixture(scope="module")
def answers(backends: dict[str, HFBackend], prompts: list[str]) -> dict[str, list]:
    # batch 3 over 4 prompts: a full batch with rows ending at different steps, and a batch of one
    return {name: b.generate(prompts, max_new_tokens=20, batch_size=3) for name, b in backends.items()}


def test_greedy_answers_identical_to_transformers_generate(answers):
    lean, ref = answers["haldet"], answers["transformers"]
    assert [a.token_ids for a in lean] == [a.token_ids for a in ref]
    assert [a.text for a in lean] == [a.text for a in ref]
    assert [a.finish_reason for a in lean] == [a.finish_reason for a in ref]
    assert len({len(a.token_ids) for a in lean}) > 1  # rows left the batch at different steps
    for a, b in zip(lean, ref, strict=True):
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-4)


def test_shared_prefix_prefill_equals_separate_prompts(backends, prompts, answers):
    """Batched prompts share their chat-template prefix (read once); each alone has nothing to share."""
    lean = backends["haldet"]
    assert common_prefix([lean.encode_prompt(p) for p in prompts]) > 5
    alone = [lean.generate([p], max_new_tokens=20, batch_size=1)[0] for p in prompts[:2]]
    assert [a.token_ids for a in alone] == [a.token_ids for a in answers["haldet"][:2]]


def test_generate_until_stops_at_the_first_token_where_it_holds(backends, prompts, answers):
    lean = backends["haldet"]
    full = answers["haldet"]
    until = lambda text: len(text.split()) >= 2  # noqa: E731
    for name, backend in backends.items():
        cut = backend.generate_until(prompts, until, max_new_tokens=20, batch_size=3)
        for c, f in zip(cut, full, strict=True):
            assert f.token_ids[: len(c.token_ids)] == c.token_ids, name  # a prefix of the full answer
            if len(c.token_ids) < len(f.token_ids):
                assert until(c.text) and c.finish_reason == "stop", name
                shorter = lean.tokenizer.decode(c.token_ids[:-1], skip_special_tokens=True).strip()
                assert not until(shorter), name  # and not a token later than needed


@pytest.fixture(scope="module")
def small_pool(backends: dict[str, HFBackend]) -> HFBackend:
    """The lean loop with a pool of 2 rows: prompts must join while other rows are still decoding."""
    pool = HFBackend("smollm2-135m", device="cpu", decode_rows=2)
    pool._model, pool.stop_ids = backends["haldet"].model, backends["haldet"].stop_ids
    return pool


def test_rows_joining_a_running_pool_give_the_same_answers(small_pool, prompts, answers, monkeypatch):
    """Continuous batching: prompts read one at a time join a 2-row pool as rows end (their caches merged at
    different widths); answers and log-probs are those of transformers' generate."""
    merges: list[int] = []
    real_merge = decode_module.merge

    def counting(parts, **kwargs):
        merges.append(len(parts))
        return real_merge(parts, **kwargs)

    monkeypatch.setattr(decode_module, "merge", counting)
    done: list[int] = []
    joined = small_pool.generate(prompts, max_new_tokens=20, batch_size=1, progress=done.append)
    assert max(merges) >= 2  # a prompt joined rows that were already decoding
    assert len(done) == len(prompts)  # progress: once per prompt, when its rows have ended
    ref = answers["transformers"]
    assert [a.token_ids for a in joined] == [a.token_ids for a in ref]
    for a, b in zip(joined, ref, strict=True):
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-4)


def test_samples_do_not_depend_on_the_pool_size(backends, small_pool, prompts):
    """Each sample row draws from its own seeded generator: a 2-row pool (prompts joining as rows end) gives the
    same K samples as one pool holding every row."""
    kwargs = dict(k=3, temperature=1.0, top_p=0.9, seeds=[11, 12, 13, 14], max_new_tokens=12, batch_size=3)
    wide = backends["haldet"].sample(prompts, **kwargs)
    narrow = small_pool.sample(prompts, **kwargs)
    assert [[s.token_ids for s in outs] for outs in narrow] == [[s.token_ids for s in outs] for outs in wide]
    assert len({tuple(s.token_ids) for outs in wide for s in outs}) > len(prompts)  # samples do differ


def test_padded_group_caps_the_padding():
    seqs = [[0] * n for n in (10, 10, 11, 30, 31)]
    assert padded_group(seqs, 0, 8) == 3  # 3 x 11 = 33 <= 1.25 x 31; with 30: 4 x 30 = 120 > 1.25 x 61
    assert padded_group(seqs, 0, 2) == 2  # at most `most`
    assert padded_group(seqs, 3, 8) == 2  # 30 and 31 read together
    assert padded_group(seqs, 4, 8) == 1  # the last prompt alone


def test_first_token_p_true_equals_a_direct_forward_pass(backends, prompts):
    lean = backends["haldet"]
    candidates = [lean.tokenizer.convert_tokens_to_ids("True"), lean.tokenizer.convert_tokens_to_ids("False")]
    outs = lean.candidate_logprobs(prompts, candidates, max_new_tokens=8, batch_size=3)
    ref = backends["transformers"].candidate_logprobs(prompts, candidates, max_new_tokens=8, batch_size=3)
    for prompt, out, r in zip(prompts, outs, ref, strict=True):
        with torch.inference_mode():
            logits = lean.model(input_ids=torch.tensor([lean.encode_prompt(prompt)])).logits[0, -1].float()
        logp = torch.log_softmax(logits, -1)
        np.testing.assert_allclose(out.extra["candidate_logprobs"], logp[candidates].numpy(), atol=1e-4)
        assert len(out.token_ids) <= 1 and out.token_ids == r.token_ids  # the verdict word only, both decoders
        assert out.token_ids in ([], [int(logp.argmax())])


@pytest.mark.parametrize(("text", "done", "stated"), [
    ("0.8", False, "0.8"),  # EOS ends it; another digit could still follow
    ("0.8\n", True, "0.8"), ("Confidence: 0.85. The answer", True, "Confidence: 0.85."),
    ("I am 90% sure. It", True, "I am 90% sure."),
    ("8.", False, "8."),  # 8.5 may follow
    ("The answer is", False, "The answer is"), ("7 out of 10", False, "7 out of 10"),
    ("7 out of 10\n", True, "7 out of 10"), ("Sure! Maybe", False, "Sure! Maybe"),
    # the whitespace that ends the first sentence came with the next number's token
    ("1. 1", True, "1."), ("0.8. 0", True, "0.8."), ("Sure! 0.3; then 0", True, "Sure! 0.3;"),
])
def test_confidence_complete(text, done, stated):
    assert confidence_complete(text) is done
    assert confidence_statement(text) == stated
    if done:  # stopping there reads the same value as the whole reply would
        more = text + "5 and more words follow"
        assert confidence_statement(more) == stated
        assert parse_confidence(confidence_statement(more)) == parse_confidence(stated) is not None


def test_common_prefix_leaves_every_row_a_token():
    assert common_prefix([[1, 2, 3], [1, 2, 4]]) == 2
    assert common_prefix([[1, 2], [1, 2, 3]]) == 1
    assert common_prefix([[1, 2, 3]]) == 0
    assert common_prefix([[5], [5]]) == 0


def test_available_cores_reads_the_cgroup_quota(tmp_path: Path, monkeypatch):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert available_cores(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None and available_cores(tmp_path) == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert thread_count() == 3 and thread_count(1) == 1


def _nucleus_reference(probs: torch.Tensor, top_p: float, u: float) -> int:
    """One row by the definition: sort descending, keep tokens whose strictly more likely mass < top_p,
    renormalise, first token whose cumulative share exceeds u."""
    order = np.argsort(-probs.numpy(), kind="stable")
    p = probs.numpy()[order].astype(np.float64)
    kept = p[(np.cumsum(p) - p) < top_p]
    return int(order[int(np.searchsorted(np.cumsum(kept) / kept.sum(), u, side="right"))])


def test_nucleus_draw_partial_sort_equals_the_definition():
    from haldet.backends.hf.sampling import nucleus_draw

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn((6, 5000), generator=gen) * torch.tensor([0.5, 1, 2, 4, 8, 16])[:, None]
    probs = torch.softmax(logits, -1)  # the first rows are flat: their head of 64 holds < top_p (full sort)
    for top_p in (0.1, 0.5, 0.9, 0.999):
        for _ in range(5):
            u = torch.rand(6, generator=gen)
            fast, full = nucleus_draw(probs, top_p, u, head=64), nucleus_draw(probs, top_p, u, head=5000)
            assert torch.equal(fast, full)
            assert fast.tolist() == [_nucleus_reference(probs[r], top_p, float(u[r])) for r in range(6)]


def test_nucleus_draw_frequencies_are_the_renormalised_nucleus():
    from haldet.backends.hf.sampling import nucleus_draw

    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]]).repeat(20000, 1)
    u = torch.rand(20000, generator=torch.Generator().manual_seed(1))
    drawn = nucleus_draw(probs, 0.9, u, head=2)  # the head of 2 holds 0.8 < 0.9: full order
    counts = torch.bincount(drawn, minlength=4).double() / 20000
    assert counts[0] == 0  # outside the nucleus (0.95 of the mass is more likely)
    np.testing.assert_allclose(counts[1:].numpy(), np.array([0.5, 0.15, 0.3]) / 0.95, atol=0.012)
    everything = torch.bincount(nucleus_draw(probs, 1.0, u), minlength=4).double() / 20000
    np.testing.assert_allclose(everything.numpy(), [0.05, 0.5, 0.15, 0.3], atol=0.012)


def test_pool_rows_fit_the_kv_budget(backends):
    """SmolLM2-135M keeps 2 x 30 layers x 3 KV heads x 64 dims x 4 bytes = 46,080 bytes per token."""
    lean = backends["haldet"]
    assert lean.pool_rows([[0] * 100], 28) == lean.decode_rows == 96  # 5.9 MB a row: the setting decides
    assert lean.pool_rows([[0] * 5_000], 28) == KV_POOL_BYTES // (46_080 * 5_028) == 6  # long prompts: fewer rows


def test_the_pool_budget_grows_with_a_cuda_devices_free_memory(monkeypatch):
    """CPU: the fixed budget. CUDA: a quarter of the free memory (the card's, plus what torch's allocator holds
    unused) when that is more, never less than the fixed one (the torch.cuda calls stand in for a card)."""
    from haldet.backends.hf.pool_budget import kv_pool_budget

    free, held = {"bytes": 36 << 30}, {"reserved": 12 << 30, "allocated": 8 << 30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["bytes"], 80 << 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: held["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: held["allocated"])
    assert kv_pool_budget(torch.device("cpu")) == KV_POOL_BYTES
    assert kv_pool_budget(torch.device("cuda", 0)) == 10 << 30  # (36 + 12 - 8) GiB / 4
    free["bytes"], held["reserved"] = 2 << 30, 8 << 30  # a nearly full card: the fixed budget still holds
    assert kv_pool_budget(torch.device("cuda", 0)) == KV_POOL_BYTES


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_hidden_states_pooled_while_sampling_equal_a_teacher_forced_pass(backends, small_pool, prompts, pooling):
    """EigenScore's per-sample state, read from the decoding steps (each ended row feeds its last token once more),
    equals the state a forward pass over prompt + sample gives; also with rows joining a small pool."""
    from haldet.backends.base import ForwardRequest

    kwargs = dict(k=2, temperature=1.0, top_p=0.9, seeds=[3, 4, 5, 6], max_new_tokens=10, batch_size=4,
                  hidden=(-1, pooling))
    lean = backends["haldet"]
    for backend in (lean, small_pool):
        outs = backend.sample(prompts, **kwargs)
        assert {o.finish_reason for samples in outs for o in samples} == {"stop", "length"}  # both endings
        requests = [ForwardRequest(ids=lean.encode_prompt(p), start=len(lean.encode_prompt(p)), key=str(i),
                                   branches={str(j): o.token_ids for j, o in enumerate(samples)})
                    for i, (p, samples) in enumerate(zip(prompts, outs, strict=True))]
        forward = lean.forward(requests, layers=[-1], poolings=[], logprobs=False, icr=False, batch_size=4,
                               branch_pooling=pooling)
        for res, samples in zip(forward, outs, strict=True):
            for j, o in enumerate(samples):
                np.testing.assert_allclose(o.extra["hidden"], res.branch_states[str(j)][0], atol=2e-3, rtol=1e-3)
    assert "hidden" not in backends["transformers"].sample(prompts[:1], **kwargs)[0][0].extra  # left to forward


def test_paired_replies_equal_the_two_queries_asked_apart(backends):
    """Two questions about the same text, their shared head read once (tails after it): the first reply is the
    greedy reply `generate_until` gives, the second's first-token log-probs those of `candidate_logprobs`."""
    lean = backends["haldet"]

    def ask(question: str, instruction: str) -> str:
        return lean.render_chat([{"role": "system", "content": "You grade answers."},
                                 {"role": "user", "content": f"Question: {question}\nAnswer: Paris\n{instruction}"}])

    first = [ask(q, "Your confidence, 0.0 to 1.0:") for q in QUESTIONS]
    second = [ask(q, "Is the answer correct? True or False:") for q in QUESTIONS]
    assert common_prefix([lean.encode_prompt(first[0]), lean.encode_prompt(second[0])]) > 20  # a real shared head
    candidates = [lean.tokenizer.convert_tokens_to_ids("True"), lean.tokenizer.convert_tokens_to_ids("False")]
    until = lambda text: len(text.split()) >= 3  # noqa: E731
    replies, verdicts = lean.paired_replies(first, second, until, candidates=candidates, max_new_tokens=12,
                                            batch_size=3)
    apart = lean.generate_until(first, until, max_new_tokens=12, batch_size=3)
    direct = lean.candidate_logprobs(second, candidates, max_new_tokens=12, batch_size=3)
    assert [r.token_ids for r in replies] == [a.token_ids for a in apart]
    assert [r.finish_reason for r in replies] == [a.finish_reason for a in apart]
    assert [v.token_ids for v in verdicts] == [d.token_ids for d in direct]
    for v, d in zip(verdicts, direct, strict=True):
        np.testing.assert_allclose(v.extra["candidate_logprobs"], d.extra["candidate_logprobs"], atol=1e-4)
    # the reference decoder asks apart (the auxiliary key says which ran); deciding needs no weights
    assert not backends["transformers"].shares_heads()
    with pytest.raises(HaldetError, match="shared head"):
        backends["transformers"].paired_replies(first, second, until, candidates=candidates, max_new_tokens=4,
                                                batch_size=3)
    fresh = HFBackend("smollm2-135m", device="cpu")
    assert fresh.shares_heads() and fresh._model is None


def test_sliding_window_models_decode_as_generate_does():
    """A model with sliding-window layers (tiny random Gemma-3 layout): its window counts cache columns, so the
    loop uses plain left padding (no shared prefix, no rows joining a running pool) and equals `generate`."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from haldet.backends.hf.decode import decode
    from haldet.backends.hf.kv_cache import mergeable

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=6,
                              max_position_embeddings=256,
                              layer_types=["sliding_attention", "full_attention"] * 2)
    model = Gemma3ForCausalLM(config).eval()
    assert not mergeable(config)
    seqs = [[2, *range(5 + i, 15 + 3 * i)] for i in range(5)]  # share a first token; lengths 11..23 (> window)
    with torch.inference_mode():
        out = decode(model, seqs, max_new_tokens=10, stop_ids=[1], pad_id=0, prefill_batch=2, pool_rows=3)
        for seq, tokens in zip(seqs, out.tokens, strict=True):
            ref = model.generate(torch.tensor([seq]), max_new_tokens=10, do_sample=False, eos_token_id=1,
                                 pad_token_id=0)
            assert tokens == ref[0, len(seq):].tolist()
        with pytest.raises(ValueError, match="full-attention"):
            decode(model, seqs[:1], max_new_tokens=2, stop_ids=[1], pad_id=0, tails=[[[7], [8]]], repeat=2)


def test_decoding_passes_the_cache_without_deprecation_warnings(backends, prompts):
    """Both decoders and the sampling paths hand the KV cache to the model under the keyword this transformers
    accepts: no `past_key_values is deprecated` FutureWarning on every forward call (a fresh `make run` is quiet)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for backend in backends.values():
            backend.generate(prompts[:2], max_new_tokens=3, batch_size=2)
            backend.sample(prompts[:1], k=2, temperature=1.0, top_p=0.9, seeds=[5], max_new_tokens=3, batch_size=2)
    assert [str(w.message) for w in caught if "past_key_values" in str(w.message)] == []
