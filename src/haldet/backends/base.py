"""The backend protocol (DESIGN section 4): what stages may ask of a model.

Every method a backend cannot serve raises `SignalUnavailableError` naming the backend and what was asked, so
a detector needing hidden states from an API model fails with one clear message before any work is done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from haldet.errors import SignalUnavailableError


@dataclass
class GenOutput:
    """One generated answer: text, the generated token ids (no prompt, no EOS/padding), their log-probs."""

    text: str
    token_ids: list[int]
    token_logprobs: list[float]
    finish_reason: str  # "stop" (EOS or stop string) or "length"
    extra: dict[str, Any] = field(default_factory=dict)


class Backend:
    """Base class; `name` is what stages record as the model id, `fingerprint()` what caches key on."""

    kind: str = ""

    def __init__(self, name: str) -> None:
        self.name = name

    def fingerprint(self) -> dict[str, Any]:
        """Everything that identifies the weights and tokenizer (goes into every stage key)."""
        return {"backend": self.kind, "model": self.name}

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        """Serialise chat messages into the model's prompt text (its chat template, or a role-based format)."""
        raise self.unavailable("chat rendering")

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]:
        """Greedy answers for rendered prompts, in input order."""
        raise self.unavailable("greedy generation")

    def unavailable(self, what: str) -> SignalUnavailableError:
        return SignalUnavailableError(
            f"the {self.kind!r} backend cannot provide {what}",
            where=f"model {self.name}",
            hint="use a white-box backend (hf) for this model, or drop the detectors that need it",
        )


def role_based_chat(messages: list[dict[str, str]]) -> str:
    """Plain role-based fallback for tokenizers without a chat template."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"
