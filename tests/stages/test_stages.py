"""Evidence stages on the embedded model: teacher-forced pass alignment, seeded sampling, P(True), cache keys,
the signal loader's formats. One backend per module; few items, few tokens."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from haldet.backends.base import ForwardRequest
from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.forward import forward_unpacked
from haldet.config import RunConfig
from haldet.schema import Generation, Instance
from haldet.signals import Signal
from haldet.stages.auxiliary import AuxiliaryStage, answer_candidates, p_true_from_logprobs
from haldet.stages.base import CellContext, Item
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader, ensure_stages, evidence_key
from haldet.store import CellStore

QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?"]


@pytest.fixture(scope="module")
def backend() -> HFBackend:
    return HFBackend("smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def prompts(backend: HFBackend) -> list[str]:
    return [backend.render_chat([{"role": "user", "content": q}]) for q in QUESTIONS]


@pytest.fixture(scope="module")
def greedy(backend: HFBackend, prompts: list[str]):
    return backend.generate(prompts, max_new_tokens=6, batch_size=2)


def test_teacher_forced_logprobs_equal_generation_and_states_align(backend, prompts, greedy):
    requests = [ForwardRequest(ids=backend.encode_prompt(p) + g.token_ids, start=len(backend.encode_prompt(p)),
                               key=str(i)) for i, (p, g) in enumerate(zip(prompts, greedy, strict=True))]
    outs = backend.forward(requests, layers=None, poolings=["mean", "last", "tbg", "slt"], logprobs=True,
                           icr=True, batch_size=2)
    n_states = backend.layer_count() + 1
    dim = backend.model.config.hidden_size
    for req, out, gen in zip(requests, outs, greedy, strict=True):
        assert out.key == req.key and out.window is None
        np.testing.assert_allclose(out.token_logprobs, gen.token_logprobs, atol=1e-3)
        assert out.token_entropies.shape == (len(gen.token_ids),) and np.all(out.token_entropies >= 0)
        for name in ("mean", "last", "tbg", "slt"):
            assert out.pooled[name].shape == (n_states, dim)
        assert out.icr.shape == (n_states - 1, 4) and np.all(np.isfinite(out.icr))
        assert np.all((out.icr[:, 0] >= 0) & (out.icr[:, 0] <= math.log(2) + 1e-6))  # JSD is in [0, ln 2]
        # alignment: an unpadded single pass gives the same states at the answer positions
        with torch.inference_mode():
            ref = backend.model(input_ids=torch.tensor([req.ids]), output_hidden_states=True).hidden_states
        answer = slice(req.start, len(req.ids))
        for layer in (0, n_states // 2, n_states - 1):
            np.testing.assert_allclose(out.pooled["mean"][layer], ref[layer][0, answer].mean(0).numpy(), atol=1e-3)
            np.testing.assert_allclose(out.pooled["last"][layer], ref[layer][0, -1].numpy(), atol=1e-3)
            np.testing.assert_allclose(out.pooled["tbg"][layer], ref[layer][0, req.start - 1].numpy(), atol=1e-3)
            np.testing.assert_allclose(out.pooled["slt"][layer], ref[layer][0, -2].numpy(), atol=1e-3)


# sdpa and eager (icr) attention both take the tree mask; statements are read at the last token, samples pooled
@pytest.mark.parametrize(("icr", "pooling"), [(False, "mean"), (True, "last")])
def test_branches_share_the_pass_and_equal_separate_sequences(backend, prompts, greedy, icr, pooling):
    suffixes = {"a": backend.encode_text("\n\nThe answer above is correct."),
                "b": backend.encode_text("\n\nIs it false? Verdict:")}
    plain = [ForwardRequest(ids=backend.encode_prompt(p) + g.token_ids, start=len(backend.encode_prompt(p)),
                            key=str(i)) for i, (p, g) in enumerate(zip(prompts, greedy, strict=True))]
    branched = [ForwardRequest(ids=r.ids, start=r.start, key=r.key, branches=suffixes) for r in plain]
    # an empty answer span: only the branches are read
    branched.append(ForwardRequest(ids=plain[0].ids[: plain[0].start], start=plain[0].start, key="empty",
                                   branches=suffixes))
    kwargs = {"layers": [0, 15, -1], "poolings": ["mean", "last"], "logprobs": True, "icr": icr, "batch_size": 3,
              "branch_pooling": pooling}
    ref = backend.forward(plain, **kwargs)
    packed = backend.forward(branched, **kwargs)
    apart = forward_unpacked(backend, branched, **kwargs)
    assert not packed[2].pooled and packed[2].token_logprobs is None and set(packed[2].branch_states) == {"a", "b"}
    for r, p in zip(ref, packed, strict=False):
        # the branches do not disturb the answer span
        np.testing.assert_allclose(p.token_logprobs, r.token_logprobs, atol=1e-4)
        np.testing.assert_allclose(p.pooled["mean"], r.pooled["mean"], atol=1e-4)
        if icr:
            np.testing.assert_allclose(p.icr, r.icr, atol=1e-4)
    for p, a, req in zip(packed, apart, branched, strict=True):
        for name, suffix in suffixes.items():
            # a branch's state equals that of its own unpadded sequence ids + suffix, pooled over the suffix
            with torch.inference_mode():
                own = backend.model(input_ids=torch.tensor([req.ids + suffix]), output_hidden_states=True)
            span = slice(len(req.ids), None) if pooling == "mean" else slice(-1, None)
            expected = np.stack([own.hidden_states[i][0, span].mean(0).numpy() for i in (0, 15, -1)])
            np.testing.assert_allclose(p.branch_states[name], expected, atol=1e-3)
            np.testing.assert_allclose(a.branch_states[name], expected, atol=1e-3)
        assert not np.allclose(p.branch_states["a"][-1], p.branch_states["b"][-1])


def test_no_double_bos_and_window_overflow_is_recorded(backend, prompts, greedy, monkeypatch):
    ids = backend.encode_prompt(prompts[0])
    bos = backend.tokenizer.bos_token_id
    assert bos is None or ids[:2] != [bos, bos]  # (SmolLM2's BOS is <|im_start|>, which the template repeats)
    monkeypatch.setattr(backend, "window", lambda: len(ids))
    req = ForwardRequest(ids=ids + greedy[0].token_ids, start=len(ids), key="x")
    out = backend.forward([req], layers=[-1], poolings=["mean"], logprobs=True, icr=False, batch_size=1)[0]
    assert out.window["policy"] == "dropped_prompt_head"
    assert out.window["dropped_tokens"] == len(greedy[0].token_ids)
    assert out.token_logprobs.shape == (len(greedy[0].token_ids),)
    monkeypatch.setattr(backend, "window", lambda: 3)
    out = backend.forward([req], layers=[-1], poolings=["mean"], logprobs=True, icr=False, batch_size=1)[0]
    assert out.window["policy"] == "skipped" and out.token_logprobs is None and not out.pooled
    # a statement that does not fit: packed, the request is skipped whole; apart, only the statement is missing
    n_answer = len(greedy[0].token_ids)
    monkeypatch.setattr(backend, "window", lambda: n_answer + 3)
    req = ForwardRequest(ids=ids + greedy[0].token_ids, start=len(ids), key="x",
                         branches={"s": backend.encode_text(" and this statement is far too long to fit")})
    packed = backend.forward([req], layers=[-1], poolings=["mean"], logprobs=True, icr=False, batch_size=1)[0]
    assert packed.window["policy"] == "skipped" and not packed.branch_states
    monkeypatch.setattr(backend, "packs_branches", lambda: False)
    apart = backend.forward([req], layers=[-1], poolings=["mean"], logprobs=True, icr=False, batch_size=1)[0]
    assert apart.token_logprobs.shape == (n_answer,) and not apart.branch_states


def test_seeded_sampling_is_reproducible_across_batches(backend, prompts):
    kw = dict(k=3, temperature=1.0, top_p=0.9, max_new_tokens=6)
    together = backend.sample(prompts, seeds=[11, 12], batch_size=6, **kw)
    alone = backend.sample(prompts[1:], seeds=[12], batch_size=3, **kw)
    assert [o.token_ids for o in together[1]] == [o.token_ids for o in alone[0]]
    other = backend.sample(prompts[1:], seeds=[99], batch_size=3, **kw)
    assert [o.token_ids for o in other[0]] != [o.token_ids for o in alone[0]]
    for o in together[0]:
        assert len(o.token_logprobs) == len(o.token_ids) and all(lp <= 0 for lp in o.token_logprobs)


def test_shared_prompt_cache_samples_equal_the_uncached_path(backend, prompts):
    """The K rows reuse one prefill of the prompt; the samples and their log-probs are those of plain
    `num_return_sequences` generation with the same per-row seeds."""
    from transformers import GenerationConfig, LogitsProcessorList

    from haldet.backends.hf.reference import left_pad
    from haldet.backends.hf.sampling import row_seed, sampler_class

    k, seeds = 3, [5, 6]
    cached = backend.sample(prompts, k=k, temperature=1.0, top_p=0.9, seeds=seeds, max_new_tokens=8, batch_size=6)
    encoded = [backend.encode_prompt(p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    ids, mask = left_pad(backend, [encoded[i] for i in order])
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, num_return_sequences=k,
                              max_new_tokens=8, output_logits=True, return_dict_in_generate=True,
                              pad_token_id=backend.tokenizer.pad_token_id, eos_token_id=sorted(backend.stop_ids))
    sampler = sampler_class()([row_seed(seeds[i], j) for i in order for j in range(k)], 1.0, 0.9, "cpu")
    with torch.inference_mode():
        out = backend.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                     logits_processor=LogitsProcessorList([sampler]))
    new = out.sequences[:, ids.shape[1]:]
    logprobs = torch.log_softmax(torch.stack(out.logits, 1).float(), -1).gather(-1, new[..., None])[..., 0]
    for pos, i in enumerate(order):
        for j in range(k):
            ref = backend.finish(new[pos * k + j].tolist(), logprobs[pos * k + j].tolist())
            assert cached[i][j].token_ids == ref.token_ids
            np.testing.assert_allclose(cached[i][j].token_logprobs, ref.token_logprobs, atol=1e-4)


def test_sampler_sanitises_non_finite_logits_and_respects_top_p():
    from haldet.backends.hf.sampling import sampler_class

    sampler = sampler_class()([0, 1, 2, 3], 1.0, 0.5, "cpu")
    scores = torch.tensor([[float("nan"), 5.0, 0.0, 0.0]] * 4)
    scores[1, 2] = float("inf")
    forced = sampler(torch.zeros((4, 1), dtype=torch.long), scores)
    chosen = forced.argmax(-1).tolist()
    assert sampler.sanitised == 5  # four NaN + one +inf
    assert chosen[0] == chosen[2] == chosen[3] == 1  # top-p 0.5 keeps only the dominant token
    assert chosen[1] == 2  # the +inf logit became the (finite) maximum
    assert torch.isfinite(forced).sum(-1).tolist() == [1, 1, 1, 1]


def test_sampler_draws_the_same_when_the_finiteness_check_takes_its_long_way():
    """The sampler looks at every logit only when their sum is not finite. A sum of finite logits can overflow:
    then nothing is sanitised and every row draws as through the short way; an inf with a -inf elsewhere (a NaN sum)
    is still found."""
    from haldet.backends.hf.sampling import sampler_class

    make = sampler_class()
    base = torch.tensor([[2.0, 5.0, 0.0, 1.0], [0.5, 0.0, 4.0, 1.0], [3.0, 3.0, 0.0, 1.0]])
    rows = torch.arange(3)
    plain = make([0, 1, 2], 1.0, 0.9, "cpu").draw(base, rows)
    huge = base.clone()
    huge[1, 3] = huge[2, 3] = 3e38  # finite, but their sum is inf: the long way, nothing to sanitise
    assert not torch.isfinite(huge.sum())
    sampler = make([0, 1, 2], 1.0, 0.9, "cpu")
    drawn = sampler.draw(huge, rows)
    assert sampler.sanitised == 0 and drawn[0] == plain[0] and drawn.tolist()[1:] == [3, 3]  # 3e38 clamps to 1e4
    both = base.clone()
    both[0, 0], both[2, 2] = float("inf"), float("-inf")  # the sum is NaN
    sampler = make([0, 1, 2], 1.0, 0.9, "cpu")
    drawn = sampler.draw(both, rows)
    assert sampler.sanitised_rows == [1, 0, 1] and drawn[0] == 0 and drawn[1] == plain[1]


def test_p_true_hand_computed():
    p, lt, _ = p_true_from_logprobs([math.log(0.3)], [math.log(0.1)])
    assert p == pytest.approx(0.75) and lt == pytest.approx(math.log(0.3))
    p, _, _ = p_true_from_logprobs([math.log(0.2), math.log(0.1)], [math.log(0.05), math.log(0.05)])
    assert p == pytest.approx(0.75)
    assert p_true_from_logprobs([float("-inf")], [float("-inf")])[0] is None
    assert p_true_from_logprobs([float("-inf")], [math.log(0.2)])[0] == 0.0


def test_p_true_reads_the_first_reply_position(backend):
    true_ids, false_ids = answer_candidates(backend)
    assert true_ids and false_ids and not set(true_ids) & set(false_ids)
    prompt = backend.render_chat([{"role": "user", "content": "Is Paris the capital of France? Reply True or False."}])
    out = backend.candidate_logprobs([prompt], true_ids + false_ids, max_new_tokens=2, batch_size=1)[0]
    with torch.inference_mode():
        logits = backend.model(input_ids=torch.tensor([backend.encode_prompt(prompt)])).logits[0, -1]
    expected = torch.log_softmax(logits.float(), -1)[true_ids + false_ids].numpy()
    np.testing.assert_allclose(out.extra["candidate_logprobs"], expected, atol=1e-4)


def _cell(tmp_path: Path, backend: HFBackend, **sections) -> CellContext:
    base = {"generation": {"max_new_tokens": 4}, "sample": {"k": 2, "max_new_tokens": 4},
            "auxiliary": {"max_new_tokens": 4}, "features": {"groups": ["hidden", "sep", "ccs", "prism"]}}
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return CellContext(config=RunConfig.model_validate(base), dataset="toy", model="smollm2-135m",
                       store=CellStore(tmp_path), backend_factory=lambda: backend)


@pytest.fixture(scope="module")
def items(backend: HFBackend) -> list[Item]:
    instances = [Instance(id=f"toy/test/{i}", dataset="toy", scenario="qa_open", task_type="short_answer",
                          question=q, references=["x"]) for i, q in enumerate(QUESTIONS)]
    return [Item(instance=inst, prompt=backend.render_chat([{"role": "user", "content": inst.question}]))
            for inst in instances]


def test_changed_settings_recompute_only_the_affected_stage(tmp_path, backend, items):
    stages = ["sample", "auxiliary", "features"]
    ctx = _cell(tmp_path, backend)
    attach_generations(items, GenerateStage(ctx).ensure(items))
    ensure_stages(ctx, items, stages)
    assert [ctx.counts[f"{s}_computed"] for s in stages] == [2, 2, 2]
    keys = {s: evidence_key(ctx, items, [s]) for s in stages}

    def rerun(**sections) -> list[int]:
        new = _cell(tmp_path, backend, **sections)
        GenerateStage(new).ensure(items)
        ensure_stages(new, items, stages)
        changed = [s for s in stages if evidence_key(new, items, [s]) != keys[s]]
        assert changed == [s for s, n in zip(stages, [new.counts[f"{s}_computed"] for s in stages], strict=True)
                           if n]
        return [new.counts[f"{s}_computed"] for s in stages]

    assert rerun() == [0, 0, 0]
    assert rerun(sample={"k": 3}) == [2, 0, 0]
    assert rerun(sample={"temperature": 0.7}) == [2, 0, 0]
    assert rerun(features={"layers": [0, -1]}) == [0, 0, 2]
    assert rerun(features={"pooling": ["mean"]}) == [0, 0, 2]
    assert rerun() == [0, 0, 0]  # the original records are still there and current again


def test_evidence_keys_of_a_cells_detectors_compute_each_stage_key_once_per_item(tmp_path, backend, items,
                                                                                   monkeypatch):
    """A cell's detectors read overlapping stages: with `known` shared among them, each stage key is computed once
    per item (keys hash prompts and earlier stages' keys; per detector, a 10,000-item run paid minutes), and every
    detector's evidence key is the one computed from scratch."""
    from haldet.stages.plan import stage_class

    ctx = _cell(tmp_path, backend)
    attach_generations(items, GenerateStage(ctx).ensure(items))
    stages = ["sample", "auxiliary", "features"]
    ensure_stages(ctx, items, stages)
    calls = {"n": 0}
    for name in ["generate", *stages]:
        cls, real = stage_class(name), stage_class(name).key

        def counted(self, item, real=real):
            calls["n"] += 1
            return real(self, item)

        monkeypatch.setattr(cls, "key", counted)
    detectors = [["sample"], ["features"], ["sample", "features"], ["auxiliary"], [], ["auxiliary", "sample"]]
    fresh = [evidence_key(ctx, items, reads) for reads in detectors]
    per_detector, calls["n"] = calls["n"], 0
    evidence_key(ctx, items, stages)  # every stage once: the floor
    once, calls["n"] = calls["n"], 0
    known: dict[str, dict[str, str]] = {}
    assert [evidence_key(ctx, items, reads, known=known) for reads in detectors] == fresh
    assert calls["n"] == once < per_detector  # the negative control: without `known`, keys are recomputed


def test_stages_compute_only_what_the_selected_detectors_read(tmp_path, backend, items):
    from haldet.flow.cell import detector_signals
    from haldet.stages.features import FeatureStage
    from haldet.stages.sample import SampleStage

    ctx = _cell(tmp_path, backend, features={"groups": ["hidden", "sep", "ccs", "prism", "icr"]})
    ctx.signals = detector_signals(["saplma", "lexical_similarity"])  # last-token states; samples, no states
    attach_generations(items, GenerateStage(ctx).ensure(items))
    recs = ensure_stages(ctx, items, ["sample", "features"])
    assert FeatureStage(ctx).groups() == ["hidden"] and FeatureStage(ctx).poolings() == ["last"]
    assert all(set(r["arrays"]) == {"hidden_last"} and r["groups"] == ["hidden"] for r in recs["features"].values())
    assert all(r["shard"] is None and r["hidden_layer"] is None for r in recs["sample"].values())
    assert SampleStage(ctx).hidden_layer() is None
    assert FeatureStage(ctx).unread_parts() == ["group sep", "group ccs", "group prism", "group icr", "pooling mean",
                                                "pooling first_n", "pooling last_n"]
    assert SampleStage(ctx).unread_parts() == ["per-sample hidden state"]
    # adding a detector that reads more recomputes the stage it needs, with the new part
    wider = _cell(tmp_path, backend, features={"groups": ["hidden", "sep", "ccs", "prism", "icr"]})
    wider.signals = detector_signals(["saplma", "lexical_similarity", "eigenscore", "ccs"])
    recs = ensure_stages(wider, items, ["sample", "features"])
    assert wider.counts == {"sample_computed": 2, "features_computed": 2}
    assert all(set(r["arrays"]) == {"hidden_last", "ccs"} for r in recs["features"].values())
    assert all(r["shard"] and r["hidden_layer"] == -1 for r in recs["sample"].values())
    # the auxiliary stage asks only the queries read: verbalized confidence without self-evaluation
    wider.signals = detector_signals(["verbalized"])
    recs = ensure_stages(wider, items, ["auxiliary"])
    assert AuxiliaryStage(wider).queries() == (True, False)
    assert all(r["verbalized"] is not None and r["self_eval_text"] is None for r in recs["auxiliary"].values())


def test_loader_returns_documented_formats(tmp_path, backend, items):
    ctx = _cell(tmp_path, backend, features={"groups": ["hidden", "sep", "ccs", "prism", "icr"],
                                             "layers": [0, 15, -1]})
    attach_generations(items, GenerateStage(ctx).ensure(items))
    ensure_stages(ctx, items, ["sample", "auxiliary", "features"])
    load = EvidenceLoader(ctx, items)
    ids = [i.id for i in items]
    dim = backend.model.config.hidden_size
    n_layers = backend.layer_count()
    samples = load(Signal.SAMPLES, ids)
    assert all(len(s) == 2 and all(isinstance(t, str) for t in s) for s in samples)
    logliks = load(Signal.SAMPLE_LOGLIKS, ids)
    assert all(a.shape == (2, 2) and a.dtype == np.float64 and np.all(a[:, 0] <= 0) for a in logliks)
    assert all(h.shape == (2, dim) and h.dtype == np.float32 for h in load(Signal.SAMPLE_HIDDEN, ids))
    assert all(isinstance(v, str) for v in load(Signal.VERBALIZED, ids))
    for v in load(Signal.SELF_EVAL, ids):
        assert set(v) == {"p_true", "logp_true", "text", "procedure", "decision", "logp_decision"}
        assert v["procedure"] == "follow_up" and v["decision"] is None and 0.0 <= v["p_true"] <= 1.0
        assert v["logp_true"] is None or v["logp_true"] <= 0.0
    for item, ent in zip(items, load(Signal.TOKEN_ENTROPIES, ids), strict=True):
        assert ent.shape == (len(item.generation.token_ids),)
    shapes = {Signal.HIDDEN_MEAN: (3, dim), Signal.HIDDEN_LAST: (3, dim), Signal.SEP_FEATURES: (2, 3, dim),
              Signal.CCS_FEATURES: (2, 3, dim), Signal.PRISM_FEATURES: (3, dim), Signal.ICR_FEATURES: (n_layers, 4)}
    for signal, shape in shapes.items():
        assert all(a.shape == shape and a.dtype == np.float32 for a in load(signal, ids)), signal
    # the ccs pair differs (positive vs negated statement), the sep pair too (two positions)
    ccs = load(Signal.CCS_FEATURES, ids)[0]
    assert not np.allclose(ccs[0], ccs[1])


def test_auxiliary_asks_a_follow_up_turn_of_the_answered_conversation(tmp_path, backend, items):
    from haldet.stages.auxiliary import VERBALIZED_INSTRUCTION

    ctx = _cell(tmp_path, backend)
    item = Item(instance=items[0].instance, prompt=items[0].prompt,
                generation=Generation(id=items[0].id, prompt=items[0].prompt, response="Paris", token_ids=[1],
                                      token_logprobs=[-0.1], finish_reason="stop", n_tokens=1, model="m"))
    prompt = AuxiliaryStage(ctx)._prompt(VERBALIZED_INSTRUCTION, item)
    # the item's own prompt (as the run showed it), the answer as the model's turn, then the question as a user turn
    assert prompt.startswith(items[0].prompt + "Paris<|im_end|>\n<|im_start|>user\n" + VERBALIZED_INSTRUCTION)
    assert prompt.endswith("<|im_start|>assistant\n")
