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
from typing import Any

from haldet.backends.base import Backend, Capability
from haldet.backends.hf.backend import HFBackend
from haldet.backends.openai_backend import OpenAIBackend
from haldet.backends.openai_client import api_key
from haldet.backends.providers import ProviderBackend, check_provider, check_roles
from haldet.backends.vllm import VLLMBackend
from haldet.config import EndpointConfig, RunConfig
from haldet.errors import HaldetError, SignalUnavailableError
from haldet.model_prices import resolve_price
from haldet.signals import Signal
from haldet.util.assets import check_alias

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
    Signal.ANSWER_LM_LOGPROBS: Capability.TEACHER_FORCED,
    Signal.TRACE_ANSWER_ENTROPIES: Capability.TEACHER_FORCED,
    Signal.TOKEN_ATTN_PREV: Capability.ATTENTIONS,
}


def check_model_names(config: RunConfig) -> None:
    """Refuse a misspelt model alias before any work (a local model name that is close to a known alias)."""
    for model in config.models:
        if backend_kind(model) == "hf":
            check_alias(model)


def backend_kind(model: str) -> str:
    if model.startswith("openai:"):
        return "openai"
    if model.startswith("api:"):
        return "api"
    if model.startswith("vllm:"):
        return "vllm"
    return "hf"


def backend_class(model: str) -> type[Backend]:
    """The class that serves a model spec (importing it loads no model and no heavy library)."""
    kind = backend_kind(model)
    if kind == "openai":
        return OpenAIBackend
    if kind == "api":
        return ProviderBackend
    if kind == "vllm":
        return VLLMBackend

    return HFBackend


def signals_of(capabilities: frozenset[Capability]) -> frozenset[Signal]:
    """The signals a backend with these capabilities can provide."""
    return frozenset(s for s in Signal if SIGNAL_NEEDS.get(s, Capability.HIDDEN_STATES) in capabilities)


def provided_signals(model: str, config: RunConfig) -> frozenset[Signal] | None:
    """The signals the model's backend can provide (None = all of them)."""
    provided = signals_of(backend_class(model).declared_for(model, config))
    return None if provided == frozenset(Signal) else provided


def check_signals(config: RunConfig, requires: Mapping[str, frozenset[Signal]],
                  usable: Mapping[str, frozenset[Signal]]) -> None:
    """Fail before any work when a selected detector needs a signal a model's backend cannot provide, or an API
    model has no key. `requires`: the selected detectors' needed signals (name -> signals); `usable`: every
    registered detector's, from which the hint names those that can run instead."""
    sample_model = config.sample.model
    if sample_model and backend_kind(sample_model) == "openai" and any(Signal.SAMPLES in r for r in requires.values()):
        api_key(sample_model, config.sample.base_url or config.endpoint.base_url,
                config.sample.api_key_env or config.endpoint.api_key_env, "sample.model")
    if sample_model and backend_kind(sample_model) == "api" and any(Signal.SAMPLES in r for r in requires.values()):
        sample_endpoint = config.endpoint.model_copy(update={k: v for k, v in (
            ("base_url", config.sample.base_url), ("api_key_env", config.sample.api_key_env)) if v is not None})
        check_provider(sample_model, config.model_copy(update={"endpoint": sample_endpoint}))
    check_sampling_temperature(config, requires)
    check_roles(config)  # judge, verdict and claim models on a provider: client, key, JSON mode
    check_self_eval_thinking(config, requires)
    for model in config.models:
        if backend_kind(model) == "openai":  # a missing API key is known now, not after the run started

            api_key(model, config.endpoint.base_url, config.endpoint.api_key_env, "--model")
        if backend_kind(model) == "api":  # the client installed, settings the provider honours, its key
            check_provider(model, config)
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
        if kind in ("openai", "api") and not config.endpoint.logprobs:
            hint += " (log-probs are off: endpoint.logprobs: false)"
        hint += "; hidden-state detectors need the hf backend (a local model: --model NAME without a prefix)"
        raise SignalUnavailableError(f"the {kind!r} backend of model {model} cannot provide what these detectors "
                                     f"need: {what}", where="--detector", hint=hint)


def access_level(model: str, config: RunConfig, usage: Mapping[str, Any] | None = None) -> str:
    """What a model's backend really gave a cell, for each result row: weights (white-box), log-probs (with how many
    alternatives an endpoint sends) or text only; replies whose asked-for log-probs came back unusable are counted."""
    kind = backend_kind(model)
    caps = backend_class(model).declared_for(model, config)
    remote = kind in ("openai", "api")
    if Capability.HIDDEN_STATES in caps:
        what = "weights (white-box)"
    elif Capability.LOGPROBS in caps:
        what = f"log-probs (top {config.endpoint.top_logprobs})" if remote else "log-probs"
    else:
        what = "text (no log-probs)"
    spoilt = ((usage or {}).get("errors") or {}).get("logprobs")
    if spoilt:
        what += f"; {spoilt} replies without usable log-probs"
    label = f"api:{model[4:].partition('/')[0]}" if kind == "api" else kind
    return f"{label} {what}"


def check_sampling_temperature(config: RunConfig, requires: Mapping[str, frozenset[Signal]]) -> None:
    """Refuse before the run detectors that need K samples at `sample.temperature` from an endpoint declared not to
    take a temperature (`endpoint.params.temperature: false`): its samples would be drawn at another temperature."""
    needing = sorted(name for name, req in requires.items() if Signal.SAMPLES in req)
    samplers = [config.sample.model] if config.sample.model else config.models
    remote = [m for m in samplers if backend_kind(m) in ("openai", "api")]
    why = config.endpoint.params.fixed_temperature_refusal(config.sample.temperature, "endpoint.params")
    if needing and remote and why:
        raise SignalUnavailableError(f"{', '.join(needing)} need K samples at temperature "
                                     f"{config.sample.temperature:g} from {remote[0]}: {why}", where="--detector",
                                     hint="sample from another model (sample.model), or drop these detectors")


def declared_thinking(model: str, config: RunConfig) -> bool:
    """Whether `model` is known to think before the run: an endpoint whose `endpoint.params` declare it, a local
    model split by markers (`reasoning.split: markers`); `auto` is resolved when the model loads."""
    if backend_kind(model) in ("openai", "api"):
        return config.endpoint.params.reasons()
    return reasoning_settings(config, model)["split"] == "markers"


def check_self_eval_thinking(config: RunConfig, requires: Mapping[str, frozenset[Signal]]) -> None:
    """Refuse before the run a self-evaluation P(True) read at the first reply token of a model declared to think
    (the auxiliary stage refuses it too, before its first question, when the chat template says so)."""
    needing = sorted(name for name, req in requires.items() if Signal.SELF_EVAL in req)
    for model in config.models if needing else []:
        why = config.auxiliary.self_eval_refusal(declared_thinking(model, config), model)
        if why:
            raise SignalUnavailableError(f"{', '.join(needing)}: {why}", where="auxiliary.procedure",
                                         hint="set `auxiliary.procedure: evaluator` (the decision word after the "
                                              "reasoning), or drop these detectors")


def priced_endpoint(model: str, config: RunConfig) -> tuple[EndpointConfig, str]:
    """The endpoint section with the model's price: declared there, else from `prices`, else genai-prices' (else
    unknown), and the price's source (`haldet.model_prices`)."""
    ep = config.endpoint
    price = resolve_price(config.prices, model, (ep.price_in, ep.price_out), base_url=ep.base_url)
    return ep.model_copy(update={"price_in": price.price_in, "price_out": price.price_out}), price.source


def make_backend(model: str, config: RunConfig) -> Backend:
    kind = backend_kind(model)
    if kind in ("api", "openai"):
        endpoint, source = priced_endpoint(model, config)
        remote = (ProviderBackend(model, endpoint) if kind == "api" else
                  OpenAIBackend(model, endpoint, chat_template_kwargs=config.chat_template_kwargs))
        remote.price_source = source
        return remote
    if kind == "vllm":
        return VLLMBackend(model, device=config.device, settings=config.vllm,
                           chat_template_kwargs=config.chat_template_kwargs,
                           reasoning=reasoning_settings(config, model))
    return HFBackend(model, device=config.device, decoder=config.decoder, fast_numerics=config.fast_numerics,
                     decode_rows=config.decode_rows, settings=config.hf,
                     chat_template_kwargs=config.chat_template_kwargs, reasoning=reasoning_settings(config, model))


def reasoning_settings(config: RunConfig, model: str) -> dict[str, Any]:
    """One model's split settings: the `reasoning` section, overridden by its `reasoning.by_model` entry."""
    cfg = config.reasoning
    own = dict(cfg.by_model.get(model, {}))
    unknown = set(own) - {"split", "open", "close"}
    if unknown:
        raise HaldetError(f"reasoning.by_model.{model} has unknown setting(s) {sorted(unknown)}",
                          where=f"reasoning.by_model.{model}", hint="set split, open or close")
    return {"split": cfg.split, "open": cfg.open, "close": cfg.close, **own}
