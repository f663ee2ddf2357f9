"""Backend capabilities are declared on the class and checked once before a run: the signals a
backend can provide follow from its declared capabilities alone, and equal what the per-backend signal lists gave
before the capabilities existed (the literal sets below)."""

from __future__ import annotations

import pytest

from haldet.backends.base import Backend, Capability
from haldet.backends.hf.backend import HFBackend
from haldet.backends.openai_backend import OpenAIBackend
from haldet.backends.select import check_signals, provided_signals, signals_of
from haldet.backends.vllm import VLLMBackend
from haldet.config import EndpointConfig, RunConfig
from haldet.errors import SignalUnavailableError
from haldet.signals import Signal

BLACK = {Signal.RESPONSE, Signal.SAMPLES, Signal.VERBALIZED, Signal.VERDICT, Signal.TOKEN_OFFSETS}
ENDPOINT_GRAY = {Signal.TOKEN_LOGPROBS, Signal.SAMPLE_LOGLIKS, Signal.SELF_EVAL, Signal.CLAIM_P_TRUE}


def test_provided_signals_follow_the_declared_capabilities() -> None:
    with_lp, without_lp = RunConfig(), RunConfig(endpoint=EndpointConfig(logprobs=False))
    assert provided_signals("openai:m", with_lp) == BLACK | ENDPOINT_GRAY
    assert provided_signals("openai:m", without_lp) == BLACK
    # vLLM also reads given text (prompt log-probs): the teacher-forced token signals; not TOKEN_CHERNOFF, which
    # needs each step's whole next-token distribution (vLLM returns its top alternatives only)
    assert provided_signals("vllm:m", with_lp) == BLACK | ENDPOINT_GRAY | {
        Signal.TOKEN_ENTROPIES, Signal.ANSWER_ENTROPIES, Signal.TOKEN_TOPK_IDS, Signal.TOKEN_TOPK_LOGPROBS,
        Signal.ANSWER_LM_LOGPROBS, Signal.TRACE_ANSWER_ENTROPIES}
    assert provided_signals("smollm2-135m", with_lp) is None  # white-box: every signal
    assert signals_of(HFBackend.capabilities) == frozenset(Signal)
    assert signals_of(Backend.capabilities) == frozenset()  # a bare backend declares nothing
    # negative control: a white-box backend without hidden states loses exactly the hidden-state signals
    no_hidden = signals_of(HFBackend.capabilities - {Capability.HIDDEN_STATES})
    assert Signal.HIDDEN_LAST not in no_hidden and Signal.SAMPLE_HIDDEN not in no_hidden
    assert Signal.TOKEN_ATTENTION in no_hidden and Signal.ANSWER_ENTROPIES in no_hidden


def test_an_instance_declares_what_its_class_declares_for_its_config() -> None:
    for logprobs in (True, False):
        config = RunConfig(endpoint=EndpointConfig(logprobs=logprobs, base_url="http://127.0.0.1:9/v1"))
        backend = OpenAIBackend("openai:m", config.endpoint)
        assert backend.capabilities == OpenAIBackend.declared(config)
        assert (Capability.LOGPROBS in backend.capabilities) is logprobs
        assert Capability.USAGE in backend.capabilities and Capability.SELF_EVAL_LOGPROBS in backend.capabilities
    assert VLLMBackend.declared(RunConfig()) == VLLMBackend.capabilities
    assert Capability.HIDDEN_STATES not in VLLMBackend.capabilities


def test_unsupported_capabilities_have_a_defined_answer_on_the_base() -> None:
    backend = Backend("plain")
    assert backend.usage_report() == {} and backend.reset_usage() is None
    with pytest.raises(SignalUnavailableError, match="layer count"):
        backend.layer_count()
    with pytest.raises(SignalUnavailableError, match="self-evaluation"):
        backend.self_eval_logprobs(["p"], ["True"], ["False"], max_new_tokens=1, batch_size=1)


def test_check_signals_is_given_the_detectors_needs() -> None:
    config = RunConfig(models=["vllm:m", "smollm2-135m"])
    usable = {"perplexity": frozenset({Signal.TOKEN_LOGPROBS}), "saplma": frozenset({Signal.HIDDEN_LAST})}
    check_signals(config, {"perplexity": usable["perplexity"]}, usable)
    with pytest.raises(SignalUnavailableError) as err:
        check_signals(config, usable, usable)
    assert "'vllm' backend of model vllm:m" in err.value.message and "saplma (hidden_last)" in err.value.message
    assert "choose --detector from: perplexity" in err.value.hint
