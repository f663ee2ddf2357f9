"""Hosted providers that are not OpenAI-compatible (Anthropic, Gemini, Bedrock, Azure, Mistral, Together, ...) by one
model string, `api:PROVIDER/MODEL`, through one multi-provider client: mozilla-ai's any-llm (optional extra
`providers`), which calls each provider's official SDK (docs/backends.md says why this client).

- `ProviderProfile` / `PROFILES`: what each provider can give, **declared** (log-probs, top log-probs up to how many,
  several samples in one request, a separate reasoning field, seed, JSON mode); a provider not listed is text-only.
  `provider_capabilities` turns a profile into backend capabilities, so a detector a provider cannot serve is
  refused before any request (`haldet.backends.select.check_signals`), and `check_provider` refuses settings it
  cannot honour (more top log-probs than it gives, `n` on a provider without it).
- `ProviderEndpoint`: one request through the client, with the errors classified exactly as `OpenAIEndpoint`'s
  (429/5xx/timeouts retried, a refused parameter named with the setting to change), so the retry loop, circuit
  breaker, usage and cache of the structured client and of the target backend are the same code.
- `ProviderBackend`: a target model on a provider (answers, K samples as separate requests unless the provider
  takes `n`, log-probs where declared).

The API key: the role's `api_key_env` when it names one other than the default, else the provider's usual variable
(`ANTHROPIC_API_KEY`, ...); haldet reads that one variable and hands the key to the provider's SDK client, nothing
else. Providers that authenticate by their cloud's credential chain (Bedrock, Vertex AI) get no key from haldet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from haldet.backends.base import Capability
from haldet.backends.openai_backend import ALWAYS, OpenAIBackend
from haldet.backends.openai_client import ChatReply, OpenAIEndpoint, RetryableError, _reply, _short
from haldet.config import EndpointConfig, RunConfig
from haldet.errors import HaldetError

PROVIDER_PREFIX = "api:"
EXTRA = "pip install 'haldet[providers]'"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"  # every role's default `api_key_env`: then the provider's own variable is read


@dataclass(frozen=True)
class ProviderProfile:
    """What a provider gives through the client: token log-probs (and at most `top_logprobs` alternatives per
    position), `n` samples in one request, a separate reasoning field, a seed, JSON mode; `key_env` its usual API-key
    variable (None: the cloud's own credential chain)."""

    logprobs: bool = False
    top_logprobs: int = 0
    n_per_request: bool = False
    reasoning_field: bool = False
    seed: bool = False
    json_mode: bool = False
    key_env: str | None = None


# Declared from each provider's API documentation as reached through the client (conservative: a capability is
# listed only where the client passes it through).
PROFILES: dict[str, ProviderProfile] = {
    "openai": ProviderProfile(logprobs=True, top_logprobs=20, n_per_request=True, seed=True, json_mode=True,
                              key_env="OPENAI_API_KEY"),
    "azureopenai": ProviderProfile(logprobs=True, top_logprobs=20, n_per_request=True, seed=True, json_mode=True,
                                   key_env="AZURE_OPENAI_API_KEY"),
    "deepseek": ProviderProfile(logprobs=True, top_logprobs=20, reasoning_field=True, json_mode=True,
                                key_env="DEEPSEEK_API_KEY"),
    "anthropic": ProviderProfile(reasoning_field=True, key_env="ANTHROPIC_API_KEY"),
    "gemini": ProviderProfile(reasoning_field=True, seed=True, json_mode=True, key_env="GEMINI_API_KEY"),
    "vertexai": ProviderProfile(reasoning_field=True, seed=True, json_mode=True),
    "bedrock": ProviderProfile(),
    "mistral": ProviderProfile(json_mode=True, key_env="MISTRAL_API_KEY"),
    "together": ProviderProfile(seed=True, json_mode=True, key_env="TOGETHER_API_KEY"),
    "groq": ProviderProfile(seed=True, json_mode=True, key_env="GROQ_API_KEY"),
}
TEXT_ONLY = ProviderProfile()


def split_spec(spec: str) -> tuple[str, str]:
    """`api:anthropic/claude-haiku-4-5` -> ("anthropic", "claude-haiku-4-5"); one clear error when malformed."""
    body = spec[len(PROVIDER_PREFIX):] if spec.startswith(PROVIDER_PREFIX) else spec
    provider, sep, model = body.partition("/")
    if not sep or not provider or not model:
        raise HaldetError(f"a provider model is named api:PROVIDER/MODEL, not {spec!r}", where="model spec",
                          hint="e.g. api:anthropic/claude-haiku-4-5, api:gemini/gemini-2.5-flash")
    return provider, model


def profile_of(provider: str) -> ProviderProfile:
    return PROFILES.get(provider, TEXT_ONLY)


def provider_capabilities(spec: str, endpoint: EndpointConfig) -> frozenset[Capability]:
    """What a target on this provider gives, as configured: text and samples always (separate requests where the
    provider takes no `n`), token log-probs where the provider has them and `endpoint.logprobs` asks for them."""
    profile = profile_of(split_spec(spec)[0])
    caps = set(ALWAYS) - {Capability.SELF_EVAL_LOGPROBS}
    if profile.logprobs and endpoint.logprobs:
        caps |= {Capability.LOGPROBS, Capability.SELF_EVAL_LOGPROBS}
    if profile.reasoning_field:
        caps.add(Capability.REASONING_FIELD)
    return frozenset(caps)


def check_provider(spec: str, config: RunConfig) -> None:
    """Refuse, before any request, settings a provider cannot honour: its client not installed, more top
    log-probs than it gives, `n` samples in one request where it takes none, no API key."""
    provider, _ = split_spec(spec)
    client_installed(spec)
    profile = profile_of(provider)
    ep = config.endpoint
    if ep.logprobs and profile.logprobs and ep.top_logprobs > profile.top_logprobs:
        raise HaldetError(f"{provider} gives at most {profile.top_logprobs} top log-probs per position, "
                          f"endpoint.top_logprobs asks {ep.top_logprobs}", where=spec,
                          hint=f"set endpoint.top_logprobs: {profile.top_logprobs}")
    if ep.n_samples == "n" and not profile.n_per_request:
        raise HaldetError(f"{provider} takes no `n` (several samples in one request)", where=spec,
                          hint="set endpoint.n_samples: calls (or auto): K seeded requests per item")
    provider_key(spec, ep.api_key_env, ep.base_url, "--model")


def check_roles(config: RunConfig) -> None:
    """The roles other than the target that name a provider model (judge, verdict model, claim extractor): the
    client installed, an API key, and JSON mode only where the provider has it, all before any request."""
    judge = config.judge
    roles = [("judge", judge.model, judge.base_url, judge.api_key_env, judge.json_mode)
             if judge.kind in ("llm", "cascade") and judge.backend == "openai" else ("judge", None, None, "", False),
             ("verdict", config.verdict.model, config.verdict.base_url, config.verdict.api_key_env, False),
             ("claims", config.claims.model, config.claims.base_url, config.claims.api_key_env, False)]
    for section, model, base_url, key_env, json_mode in roles:
        if not model or not model.startswith(PROVIDER_PREFIX):
            continue
        client_installed(model)
        provider_key(model, key_env, base_url, f"{section}.model")
        if json_mode and not profile_of(split_spec(model)[0]).json_mode:
            raise HaldetError(f"{model} has no JSON mode (response_format), which {section}.json_mode asks for",
                              where=f"{section}.model", hint=f"set {section}.json_mode: false (replies are parsed, "
                                                             "with a correction turn when malformed)")


def client_installed(spec: str) -> None:
    try:
        import any_llm  # noqa: F401
    except ImportError:
        raise HaldetError(f"model {spec} needs the provider client (any-llm), which is not installed", where=spec,
                          hint=EXTRA) from None


def provider_key(spec: str, api_key_env: str, base_url: str | None, option: str) -> str | None:
    """The API key for a provider model: from the role's `api_key_env` when it is not the default, else the
    provider's own variable; None where the provider authenticates by its cloud's credential chain; any string for a
    local server (base_url given); else one clear error."""
    import os

    provider, _ = split_spec(spec)
    env = api_key_env if api_key_env != DEFAULT_KEY_ENV or provider == "openai" else profile_of(provider).key_env
    if env is None:
        return None
    key = os.environ.get(env)
    if key:
        return key
    if base_url is not None:
        return "not-needed"
    raise HaldetError(f"no API key for {spec}: ${env} is not set", where=option,
                      hint=f"export {env}=..., or name another variable with api_key_env")


class ProviderEndpoint(OpenAIEndpoint):
    """A provider model behind the multi-provider client, with `OpenAIEndpoint`'s retry loop, breaker and usage
    (`call`, `attempt`): only the one request (`chat`) differs."""

    def __init__(self, spec: str, *, base_url: str | None, api_key_env: str = DEFAULT_KEY_ENV,
                 timeout: float = 60.0, breaker_after: int = 5, where: str = "", option: str = "--model",
                 section: str = "endpoint") -> None:
        client_installed(spec)
        self.provider, self.model_id = split_spec(spec)
        self.profile = profile_of(self.provider)
        super().__init__(spec, base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                         breaker_after=breaker_after, where=where or f"{spec} at {base_url or self.provider}",
                         option=option, section=section)

    def lookup_key(self, model: str, base_url: str | None, api_key_env: str, option: str) -> Any:
        return provider_key(model, api_key_env, base_url, option)

    def connect(self, key: str | None) -> Any:
        from any_llm import AnyLLM

        # the SDK's own retries off (ours are counted); its errors unified (status, param, Retry-After)
        return AnyLLM.create(self.provider, api_key=key, api_base=self.base_url, unified_exceptions=True,
                             max_retries=0, timeout=self.timeout)

    def unsupported(self, params: dict[str, Any]) -> str | None:
        """A parameter this provider does not take (declared in its profile), refused before the request."""
        p = self.profile
        checks = {"logprobs": p.logprobs, "top_logprobs": p.logprobs, "n": p.n_per_request,
                  "response_format": p.json_mode, "extra_body": False}
        return next((name for name, ok in checks.items() if name in params and not ok), None)

    async def chat(self, messages: list[dict[str, str]], **params: Any) -> ChatReply:
        from any_llm.exceptions import AnyLLMError, RateLimitError

        self.breaker.check()
        if not self.profile.seed:  # haldet's own seed only makes reruns repeat where a provider honours one
            params.pop("seed", None)
        bad = self.unsupported(params)
        if bad is not None:
            raise self.refused(400, f"{self.provider} does not take `{bad}` (declared in its profile)", bad, params)
        effort = params.pop("reasoning_effort", None)
        try:
            resp = await self.client.acompletion(model=self.model_id, messages=messages,
                                                 reasoning_effort=effort or "auto", **params)
        except RateLimitError as exc:
            raise RetryableError("429", "rate limited (429)", _seconds(exc.retry_after)) from exc
        except AnyLLMError as exc:
            status = exc.status_code
            if status is None:
                raise self._transport(exc) from exc
            if status >= 500 or status in (408, 409, 429):
                raise RetryableError(str(status), f"server error {status}") from exc
            raise self.refused(status, _short(exc), exc.param, params) from None
        self.breaker.success()
        return _reply(resp)

    def _transport(self, exc: Exception) -> RetryableError:
        """A failure without an HTTP status: a timeout or a lost connection (both count towards the breaker), else a
        reply the client could not read."""
        original = getattr(exc, "original_exception", None) or exc
        name = type(original).__name__.lower()
        if "timeout" in name:
            err = RetryableError("timeout", f"request timed out after {self.timeout:g}s")
        elif "connect" in name:
            err = RetryableError("connection", f"connection error: {_short(original)}")
        else:
            return RetryableError("malformed", f"unreadable response: {_short(original)}")
        self.breaker.failure(err.kind, str(err))
        return err

    async def close(self) -> None:
        client = getattr(self.client, "client", None)  # the provider SDK's own client
        closer = getattr(client, "close", None)
        if closer is not None:
            result = closer()
            if hasattr(result, "__await__"):
                await result


def _seconds(value: Any) -> float | None:
    try:
        return min(float(value), 60.0) if value is not None else None
    except (TypeError, ValueError):
        return None


class ProviderBackend(OpenAIBackend):
    """A target model on a hosted provider (`api:PROVIDER/MODEL`): the `openai` backend's requests, K samples,
    usage and cost, through `ProviderEndpoint`; what it gives is its provider's declared profile."""

    kind = "api"
    capabilities = ALWAYS | {Capability.LOGPROBS, Capability.REASONING_FIELD}  # at most; an instance: its profile

    @classmethod
    def declared_for(cls, model: str, config: Any) -> frozenset[Capability]:
        return provider_capabilities(model, config.endpoint)

    def __init__(self, name: str, config: EndpointConfig, **_: Any) -> None:
        provider, _model = split_spec(name)
        self.profile = profile_of(provider)
        # log-probs are asked only where the provider has them (the capability check refused detectors needing them)
        super().__init__(name, config.model_copy(update={"logprobs": config.logprobs and self.profile.logprobs}))
        self.capabilities = provider_capabilities(name, config)
        if not self.profile.n_per_request:
            self.n_supported = False  # K samples as K seeded requests

    def check_key(self) -> None:
        provider_key(self.name, self.config.api_key_env, self.config.base_url, "--model")

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "client": "any-llm"}

    def make_endpoint(self) -> OpenAIEndpoint:
        c = self.config
        return ProviderEndpoint(self.name, base_url=c.base_url, api_key_env=c.api_key_env, timeout=c.timeout,
                                breaker_after=c.breaker_after, option="--model",
                                where=f"model {self.name} at {c.base_url or split_spec(self.name)[0]}")
