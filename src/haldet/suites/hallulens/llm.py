"""HalluLens's model for construction and judging: the structured-LLM client (`haldet.backends.structured`)
configured from a `JudgeConfig`, with replies cached on disk.

HalluLens needs many kinds of model calls (write a question, check answerability, judge a refusal, extract
claims, ...), each with its own reply format: a `Request` carries its parser, and `ask` returns per request the
parsed value or a `CallFailure` after its retries (listed, never turned into a value). Decoding is deterministic
(temperature 0, fixed seed), so a reply is a function of the request; replies are cached in a JSONL file keyed by
the model's fingerprint and the whole request, which makes construction and judging resumable and reruns free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from haldet.backends.structured import ClientSettings, StructuredClient
from haldet.config import JudgeConfig
from haldet.errors import HaldetError

CORRECTION = ("Your reply could not be read: {error}. Reply again, following the requested format exactly "
              "and adding nothing else.")


class StructuredLLM(StructuredClient):
    """A model answering structured requests. `config` is a `JudgeConfig` (backend, model, endpoint, retries,
    concurrency, seed, max_tokens); `cache` a JSONL file of earlier replies (None = no cache)."""

    def __init__(self, config: JudgeConfig, *, cache: Path | None = None, backend: Any = None,
                 option: str = "--judge-model") -> None:
        if not config.model:
            raise HaldetError("no model configured for HalluLens calls", where=option,
                              hint="name an OpenAI-compatible model (with --*-base-url) or a local one with "
                                   "backend hf, e.g. smollm2-135m")
        self.config = config
        self.option = option  # the flag naming this model, for messages
        # local prompt tokens are not counted: HalluLens usage reports have always shown completion tokens only
        settings = ClientSettings.of_judge(config, option=option, count_prompt_tokens=False,
                                           where=f"{option} {config.model} at {config.base_url or 'api.openai.com'}")
        super().__init__(settings, correction=_correction, cache=cache, local=backend)

    @property
    def id(self) -> str:
        return f"{self.config.backend}:{self.config.model}"

    def usage_report(self) -> dict[str, Any]:
        return {"model": self.config.model, "backend": self.config.backend, "calls": self.usage.calls,
                "retries": self.usage.retries, "failures": self.usage.failures, "malformed": self.usage.malformed,
                "prompt_tokens": self.usage.prompt_tokens, "completion_tokens": self.usage.completion_tokens,
                "seconds": round(self.usage.seconds, 3),
                "cost_usd": self.usage.cost_usd(self.config.price_in, self.config.price_out)}


def _correction(error: str) -> str:
    return CORRECTION.format(error=error)
