"""A model HalluLens tests: its backend comes from `haldet.backends.select`, as a run's model's does, so it takes
the same settings (device, decoder, `hf`/`vllm`/`endpoint` sections) and is checked the same way before any work
(a misspelt alias, a backend that cannot answer in text, an endpoint without an API key).

Answers are greedy (temperature 0, top-p 1) with the model's chat template and no system prompt (paper appendix C).
An endpoint answer that failed after the endpoint's retries is a `CallFailure`: listed, never an answer, and asked
again on the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from haldet.backends.base import Backend
from haldet.backends.select import backend_kind, check_model_names, check_signals, make_backend
from haldet.backends.structured import CallFailure
from haldet.config import EndpointConfig, RunConfig
from haldet.signals import Signal

# what HalluLens reads of a tested model: its answer text
NEEDS = {"hallulens": frozenset({Signal.RESPONSE})}


class Target:
    """A tested model: `openai:<name>` (an OpenAI-compatible endpoint), `api:<provider>/<model>` (a hosted
    provider), `vllm:<model>`, or a local hf id / alias / path. `config` carries the backend settings (default:
    haldet's); `base_url` is the endpoint of `openai:` and `api:` models (it overrides `config.endpoint.base_url`);
    `backend` an already loaded one (tests share one model)."""

    def __init__(self, spec: str, *, config: RunConfig | None = None, base_url: str | None = None,
                 backend: Backend | None = None) -> None:
        config = config or RunConfig()
        endpoint = config.endpoint.model_dump()
        if base_url is not None:
            endpoint["base_url"] = base_url
        endpoint["logprobs"] = False  # the answer text is all HalluLens reads
        self.config = config.model_copy(update={"models": [spec], "endpoint": EndpointConfig(**endpoint)})
        self.spec = spec
        self.remote = backend_kind(spec) in ("openai", "api")
        check_model_names(self.config)
        check_signals(self.config, NEEDS, NEEDS)
        self._backend = backend

    def fingerprint(self) -> Any:
        """Part of every answer's cache key (an endpoint's: the model and its address, as before a backend
        served it)."""
        if self.remote:  # declared request parameters (reasoning endpoints) key the answers too, when set
            params = self.config.endpoint.params.identity()
            return [backend_kind(self.spec), self.spec, self.config.endpoint.base_url,
                    *([{"params": params}] if params else [])]
        return [backend_kind(self.spec), self.spec, self.backend.fingerprint()]

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = make_backend(self.spec, self.config)
        return self._backend

    def answer(self, prompts: Sequence[str], max_new_tokens: int, progress: Callable[[int], None] | None) -> list[
            str | CallFailure]:
        rendered = [self.backend.render_chat([{"role": "user", "content": p}]) for p in prompts]
        outs = self.backend.generate(rendered, max_new_tokens=max_new_tokens, batch_size=8, progress=progress)
        if progress is not None and self.remote:  # an endpoint's requests run concurrently and tick no bar
            progress(len(prompts))
        return [CallFailure(error=o.error, attempts=int(o.extra.get("attempts", 1))) if o.error else o.text.strip()
                for o in outs]
