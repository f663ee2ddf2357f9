"""The `vllm` backend. Everywhere: converting vLLM's outputs (EOS stripped with its log-prob, the sampled token's
log-prob per position, prompt log-probs of a candidate, given responses' token evidence from prompt log-probs), the
spec routing and the refusal of hidden-state detectors. With vLLM and a GPU only: the embedded model's greedy
answers, log-probs and given-text evidence agree with the hf backend's (not run in the sessions that wrote them: no
GPU was available)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from haldet.backends.select import backend_kind, provided_signals
from haldet.backends.vllm import completion_output, entropy_from_topk, prompt_logprob_of_last, token_output
from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.signals import Signal


def lp(value: float) -> SimpleNamespace:
    return SimpleNamespace(logprob=value)


def test_completion_output_strips_eos_and_reads_sampled_logprobs() -> None:
    completion = SimpleNamespace(text="Paris.", token_ids=[11, 12, 2], finish_reason="stop",
                                 logprobs=[{11: lp(-0.5), 99: lp(-1.0)}, {12: lp(-0.25)}, {2: lp(-0.1)}])
    out = completion_output(completion, stop_ids={2})
    assert out.token_ids == [11, 12] and out.token_logprobs == [-0.5, -0.25] and out.finish_reason == "stop"
    cut = completion_output(SimpleNamespace(text="Par", token_ids=[11], finish_reason="length",
                                            logprobs=[{11: lp(-0.5)}]), stop_ids={2})
    assert cut.finish_reason == "length" and cut.token_ids == [11]
    result = SimpleNamespace(prompt_token_ids=[5, 6, 7], prompt_logprobs=[None, {6: lp(-2.0)}, {7: lp(-0.7)}])
    assert prompt_logprob_of_last(result) == -0.7


def test_vllm_spec_routing_and_what_it_provides() -> None:
    assert backend_kind("vllm:smollm2-135m") == "vllm" and backend_kind("smollm2-135m") == "hf"
    provided = provided_signals("vllm:x", RunConfig())
    assert provided is not None and Signal.SAMPLE_LOGLIKS in provided and Signal.HIDDEN_LAST not in provided
    # given responses through prompt log-probs: the likelihood/entropy unit detectors and perplexity can run
    assert {Signal.TOKEN_LOGPROBS, Signal.ANSWER_ENTROPIES, Signal.TOKEN_TOPK_LOGPROBS} <= provided
    assert Signal.TOKEN_ATTENTION not in provided


def test_entropy_from_topk_by_hand() -> None:
    full = [0.5, 0.2, 0.2, 0.1]
    exact = -sum(p * math.log(p) for p in full)
    assert entropy_from_topk([math.log(p) for p in full]) == pytest.approx(exact)
    top2 = -(0.5 * math.log(0.5) + 0.2 * math.log(0.2) + 0.3 * math.log(0.3))  # the rest (0.3) as one outcome
    assert entropy_from_topk([math.log(0.5), math.log(0.2)]) == pytest.approx(top2) and top2 < exact


def ranked(value: float, rank: int) -> SimpleNamespace:
    return SimpleNamespace(logprob=value, rank=rank, decoded_token="x")


def test_given_response_evidence_from_prompt_logprobs() -> None:
    # prompt [5, 6] then answer [7, 8]; vLLM's shape: None for the first token, then per position a dict holding
    # the top alternatives and the position's own token (token 8 is not among the top 2 at its position)
    prompt_lps = [None, {6: ranked(-1.0, 1), 2: ranked(-2.0, 2)},
                  {7: ranked(math.log(0.5), 1), 3: ranked(math.log(0.3), 2)},
                  {9: ranked(math.log(0.6), 1), 1: ranked(math.log(0.3), 2), 8: ranked(math.log(0.05), 4)}]
    out = token_output("a", prompt_lps, [5, 6, 7, 8], 2, top_k=2, entropies=True, limit=2)
    assert out.token_logprobs == pytest.approx([math.log(0.5), math.log(0.05)])
    assert out.topk_ids.tolist() == [[7, 3], [8, 9]]  # observed first, then the best other
    assert out.topk_logprobs[1].tolist() == pytest.approx([math.log(0.05), math.log(0.6)])
    h0 = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
    h1 = -(0.6 * math.log(0.6) + 0.3 * math.log(0.3) + 0.1 * math.log(0.1))  # top 2 of the limit, rest 0.1
    assert out.entropies.tolist() == pytest.approx([h0, h1])
    with pytest.raises(HaldetError, match=r"tokens\.top_k"):
        token_output("a", prompt_lps, [5, 6, 7, 8], 2, top_k=4, entropies=False, limit=2)
    with pytest.raises(HaldetError, match="no log-prob"):
        token_output("a", [None, None, {3: ranked(-1.0, 1)}, None], [5, 6, 7, 8], 2, top_k=0, entropies=False,
                     limit=2)


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _gpu(), reason="the vllm backend needs a GPU")
def test_vllm_greedy_matches_hf_on_the_embedded_model() -> None:
    pytest.importorskip("vllm")
    from haldet.backends.hf.backend import HFBackend
    from haldet.backends.vllm import VLLMBackend

    hf, vl = HFBackend("smollm2-135m", device="cuda"), VLLMBackend("vllm:smollm2-135m")
    prompts = [hf.render_chat([{"role": "user", "content": q}]) for q in
               ("What is the capital of France?", "Who wrote Hamlet?", "What is 2 + 2?")]
    a = hf.generate(prompts, max_new_tokens=16, batch_size=3)
    b = vl.generate(prompts, max_new_tokens=16, batch_size=3)
    assert sum(x.text == y.text for x, y in zip(a, b, strict=True)) >= 2
    for x, y in zip(a, b, strict=True):
        if x.token_ids == y.token_ids:
            assert y.token_logprobs == pytest.approx(x.token_logprobs, abs=0.05)
    samples = vl.sample(prompts, k=3, temperature=1.0, top_p=0.9, seeds=[1, 2, 3], max_new_tokens=8, batch_size=9)
    again = vl.sample(prompts[:1], k=3, temperature=1.0, top_p=0.9, seeds=[1], max_new_tokens=8, batch_size=3)
    assert [s.text for s in samples[0]] == [s.text for s in again[0]]  # per-item seed: batch-independent


@pytest.mark.skipif(not _gpu(), reason="the vllm backend needs a GPU")
def test_vllm_given_responses_match_the_hf_token_pass() -> None:
    pytest.importorskip("vllm")
    from haldet.backends.base import TokenRequest
    from haldet.backends.hf.backend import HFBackend
    from haldet.backends.vllm import VLLMBackend

    hf, vl = HFBackend("smollm2-135m", device="cuda"), VLLMBackend("vllm:smollm2-135m")
    prompt = hf.encode_prompt("Tell me about Paris.\n")
    requests = [TokenRequest(prompt, hf.encode_response(t)[0], str(i)) for i, t in
                enumerate(["Paris is the capital of France.", "Paris lies on the Rhine and has two million cats."])]
    a = hf.token_pass(requests, top_k=5, entropies=True, attention=False, batch_size=2)
    b = vl.token_pass(requests, top_k=5, entropies=True, attention=False, batch_size=2)
    for x, y in zip(a, b, strict=True):
        assert y.token_logprobs == pytest.approx(x.token_logprobs, abs=0.05)
        assert (y.entropies <= x.entropies + 0.05).all()  # from the top 20 only: a lower bound
        assert (x.topk_ids[:, 0] == y.topk_ids[:, 0]).all()
