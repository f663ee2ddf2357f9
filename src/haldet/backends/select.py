"""Which backend serves a model spec, and what it can provide, decided before any work.

`openai:NAME` -> the `openai` backend (an OpenAI-compatible endpoint, `endpoint.*` settings), `vllm:MODEL` -> the
`vllm` backend (optional extra), anything else -> `hf` (transformers). `check_signals` refuses, before a single
item is generated, a run whose detectors need evidence the chosen backend cannot give (hidden states from an API
model, log-probs from an endpoint asked not to send them), naming the detectors that can run instead.
"""

from __future__ import annotations

from haldet.backends.base import Backend
from haldet.config import RunConfig
from haldet.errors import SignalUnavailableError
from haldet.schema import Access
from haldet.signals import SIGNAL_ACCESS, Signal

BLACK_SIGNALS = frozenset(s for s, a in SIGNAL_ACCESS.items() if a is Access.BLACK)
# gray-box signals an OpenAI-compatible endpoint gives with log-probs (token entropies need the full distribution)
ENDPOINT_GRAY = frozenset({Signal.TOKEN_LOGPROBS, Signal.SAMPLE_LOGLIKS, Signal.SELF_EVAL})
# what vLLM gives: everything but hidden states and the white-box feature groups
VLLM_SIGNALS = BLACK_SIGNALS | ENDPOINT_GRAY | {Signal.TOKEN_ENTROPIES}


def backend_kind(model: str) -> str:
    if model.startswith("openai:"):
        return "openai"
    if model.startswith("vllm:"):
        return "vllm"
    return "hf"


def provided_signals(model: str, config: RunConfig) -> frozenset[Signal] | None:
    """The signals the model's backend can provide (None = all of them)."""
    kind = backend_kind(model)
    if kind == "openai":
        return BLACK_SIGNALS | (ENDPOINT_GRAY if config.endpoint.logprobs else frozenset())
    if kind == "vllm":
        return VLLM_SIGNALS
    return None


def check_signals(config: RunConfig) -> None:
    """Fail before any work when a selected detector needs a signal a model's backend cannot provide, or an API
    model has no key."""
    from haldet.detectors.base import DETECTORS

    for model in config.models:
        if backend_kind(model) == "openai":  # a missing API key is known now, not after the run started
            from haldet.backends.openai_client import api_key

            api_key(model, config.endpoint.base_url, config.endpoint.api_key_env, "--model")
        provided = provided_signals(model, config)
        if provided is None:
            continue
        requires = {name: DETECTORS.get(name, where="--detector").requires for name in config.detectors}
        refused = {name: sorted(s.value for s in req - provided) for name, req in requires.items() if req - provided}
        if not refused:
            continue
        kind = backend_kind(model)
        usable = sorted(name for name, cls in DETECTORS if cls.requires <= provided)
        what = "; ".join(f"{name} ({', '.join(sig)})" for name, sig in sorted(refused.items()))
        hint = f"choose --detector from: {', '.join(usable)}"
        if kind == "openai" and not config.endpoint.logprobs:
            hint += " (log-probs are off: endpoint.logprobs: false)"
        hint += "; hidden-state detectors need the hf backend (a local model: --model NAME without a prefix)"
        raise SignalUnavailableError(f"the {kind!r} backend of model {model} cannot provide what these detectors "
                                     f"need: {what}", where="--detector", hint=hint)


def make_backend(model: str, config: RunConfig) -> Backend:
    kind = backend_kind(model)
    if kind == "openai":
        from haldet.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(model, config.endpoint)
    if kind == "vllm":
        from haldet.backends.vllm import VLLMBackend

        return VLLMBackend(model, device=config.device)
    from haldet.backends.hf.backend import HFBackend

    return HFBackend(model, device=config.device, decoder=config.decoder, fast_numerics=config.fast_numerics,
                     decode_rows=config.decode_rows)
