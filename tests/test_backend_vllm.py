"""The `vllm` backend. Everywhere: converting vLLM's outputs (EOS stripped with its log-prob, the sampled token's
log-prob per position, prompt log-probs of a candidate), the spec routing and the refusal of hidden-state
detectors. With vLLM and a GPU only: the embedded model's greedy answers and log-probs agree with the hf backend's
(not run in the session that wrote this: no GPU was available)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from haldet.backends.select import backend_kind, provided_signals
from haldet.backends.vllm import completion_output, prompt_logprob_of_last
from haldet.config import RunConfig
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
