"""Which backend serves a model spec, and what it can provide, decided before any work.

`openai:NAME` -> the `openai` backend (an OpenAI-compatible endpoint, `endpoint.*` settings), `vllm:MODEL` -> the
`vllm` backend (optional extra), anything else -> `hf` (transformers). `check_signals` refuses, before a single
item is generated, a run whose detectors need evidence the chosen backend cannot give (hidden states from an API
model, log-probs from an endpoint asked not to send them), naming the detectors that can run instead. It reads
the backend class's declared capabilities (`Backend.declared`) and is given the detectors' needs by its caller,
so this module knows backends and signals, never detectors.
"""

from __future__ import annotations

from collections.abc import Mapping

from haldet.backends.base import Backend, Capability
from haldet.config import RunConfig
from haldet.errors import SignalUnavailableError
from haldet.signals import Signal

# the capability each signal needs of the model's backend; a signal not listed needs hidden states (white-box)
SIGNAL_NEEDS: dict[Signal, Capability] = {
    Signal.RESPONSE: Capability.TEXT,
    Signal.VERBALIZED: Capability.TEXT,
    Signal.VERDICT: Capability.TEXT,
    Signal.TOKEN_OFFSETS: Capability.TEXT,
    Signal.SAMPLES: Capability.N_SAMPLES,
    Signal.TOKEN_LOGPROBS: Capability.LOGPROBS,
    Signal.SAMPLE_LOGLIKS: Capability.LOGPROBS,
    Signal.SELF_EVAL: Capability.LOGPROBS,
    Signal.CLAIM_P_TRUE: Capability.LOGPROBS,
    Signal.TOKEN_ENTROPIES: Capability.ENTROPIES,
    Signal.ANSWER_ENTROPIES: Capability.TEACHER_FORCED,
    Signal.TOKEN_TOPK_IDS: Capability.TEACHER_FORCED,
    Signal.TOKEN_TOPK_LOGPROBS: Capability.TEACHER_FORCED,
    Signal.TOKEN_ATTENTION: Capability.ATTENTIONS,
    Signal.TOKEN_ATTN_LOGDIAG: Capability.ATTENTIONS,
    Signal.ICR_FEATURES: Capability.ATTENTIONS,
    Signal.REDEEP_FEATURES: Capability.ATTENTIONS,
}


def check_model_names(config: RunConfig) -> None:
    """Refuse a misspelt model alias before any work (a local model name that is close to a known alias)."""
    from haldet.util.assets import check_alias

    for model in config.models:
        if backend_kind(model) == "hf":
            check_alias(model)


def backend_kind(model: str) -> str:
    if model.startswith("openai:"):
        return "openai"
    if model.startswith("vllm:"):
        return "vllm"
    return "hf"


def backend_class(model: str) -> type[Backend]:
    """The class that serves a model spec (importing it loads no model and no heavy library)."""
    kind = backend_kind(model)
    if kind == "openai":
        from haldet.backends.openai_backend import OpenAIBackend

        return OpenAIBackend
    if kind == "vllm":
        from haldet.backends.vllm import VLLMBackend

        return VLLMBackend
    from haldet.backends.hf.backend import HFBackend

    return HFBackend


def signals_of(capabilities: frozenset[Capability]) -> frozenset[Signal]:
    """The signals a backend with these capabilities can provide."""
    return frozenset(s for s in Signal if SIGNAL_NEEDS.get(s, Capability.HIDDEN_STATES) in capabilities)


def provided_signals(model: str, config: RunConfig) -> frozenset[Signal] | None:
    """The signals the model's backend can provide (None = all of them)."""
    provided = signals_of(backend_class(model).declared(config))
    return None if provided == frozenset(Signal) else provided


def check_signals(config: RunConfig, requires: Mapping[str, frozenset[Signal]],
                  usable: Mapping[str, frozenset[Signal]]) -> None:
    """Fail before any work when a selected detector needs a signal a model's backend cannot provide, or an API
    model has no key. `requires`: the selected detectors' needed signals (name -> signals); `usable`: every
    registered detector's, from which the hint names those that can run instead."""
    sample_model = config.sample.model
    if sample_model and backend_kind(sample_model) == "openai" and any(Signal.SAMPLES in r for r in requires.values()):
        from haldet.backends.openai_client import api_key

        api_key(sample_model, config.sample.base_url or config.endpoint.base_url,
                config.sample.api_key_env or config.endpoint.api_key_env, "sample.model")
    for model in config.models:
        if backend_kind(model) == "openai":  # a missing API key is known now, not after the run started
            from haldet.backends.openai_client import api_key

            api_key(model, config.endpoint.base_url, config.endpoint.api_key_env, "--model")
        provided = provided_signals(model, config)
        if provided is None:
            continue
        refused = {name: sorted(s.value for s in req - provided) for name, req in requires.items() if req - provided}
        if not refused:
            continue
        kind = backend_kind(model)
        can_run = sorted(name for name, req in usable.items() if req <= provided)
        what = "; ".join(f"{name} ({', '.join(sig)})" for name, sig in sorted(refused.items()))
        hint = f"choose --detector from: {', '.join(can_run)}"
        if kind == "openai" and not config.endpoint.logprobs:
            hint += " (log-probs are off: endpoint.logprobs: false)"
        hint += "; hidden-state detectors need the hf backend (a local model: --model NAME without a prefix)"
        raise SignalUnavailableError(f"the {kind!r} backend of model {model} cannot provide what these detectors "
                                     f"need: {what}", where="--detector", hint=hint)


def make_backend(model: str, config: RunConfig) -> Backend:
    kind = backend_kind(model)
    if kind == "openai":
        from haldet.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(model, config.endpoint, chat_template_kwargs=config.chat_template_kwargs)
    if kind == "vllm":
        from haldet.backends.vllm import VLLMBackend

        return VLLMBackend(model, device=config.device, settings=config.vllm,
                           chat_template_kwargs=config.chat_template_kwargs)
    from haldet.backends.hf.backend import HFBackend

    return HFBackend(model, device=config.device, decoder=config.decoder, fast_numerics=config.fast_numerics,
                     decode_rows=config.decode_rows, settings=config.hf,
                     chat_template_kwargs=config.chat_template_kwargs)
