"""A local reasoning model's outputs split into reasoning and answer (`haldet.text.reasoning`), on the generated ids.

The markers are the chat template's own (`<think>` / `</think>` by default, or a model's `reasoning.by_model`
entry); `auto` finds them in the template, so a model without thinking tags keeps whole outputs as answers and its
fingerprint (so every stage key) unchanged. With markers, an output's answer ids are those after the closing marker
(leading whitespace-only tokens skipped): `GenOutput.token_ids` and `token_logprobs` hold the answer, `extra` the
reasoning text, every output token before the answer and the token ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from haldet.backends.base import GenOutput
from haldet.errors import HaldetError
from haldet.text.reasoning import Markers, split_ids, template_markers

SPLIT_MODES = ("auto", "markers", "off")


def resolve_markers(backend: Any, settings: dict[str, Any] | None) -> Markers | None:
    """The markers of this model under `settings` ({split, open, close}; None = auto with `<think>` tags)."""
    settings = dict(settings or {})
    mode = settings.get("split", "auto")
    if mode not in SPLIT_MODES:
        raise HaldetError(f"unknown reasoning split {mode!r} for model {backend.name}", where="reasoning.split",
                          hint=f"choose {', '.join(SPLIT_MODES)}")
    if mode == "off":
        return None
    template = getattr(backend.tokenizer, "chat_template", None) or ""
    if not isinstance(template, str):  # a dict of named templates
        template = "\n".join(str(t) for t in dict(template).values())

    def render() -> str:
        return backend.render_chat([{"role": "user", "content": "x"}]) if template else ""

    return template_markers(render, template, settings.get("open", "<think>"), settings.get("close", "</think>"),
                            force=mode == "markers")


def split_output(backend: Any, markers: Markers, ids: Sequence[int], logprobs: Sequence[float],
                 finish_reason: str) -> GenOutput:
    """One finished output (ids cut at the stop token) as answer ids and text, the reasoning in `extra`."""
    cut = split_ids(ids, backend.encode_text(markers.open), backend.encode_text(markers.close),
                    opens_in_prompt=markers.opens_in_prompt, finish_reason=finish_reason, limit=None)
    if not cut.has_reasoning:
        return GenOutput(text=backend.answer_text(ids), token_ids=list(ids),
                         token_logprobs=[float(x) for x in logprobs], finish_reason=finish_reason)
    a0 = cut.a0
    while a0 < len(ids) and not str(backend.tokenizer.decode([ids[a0]], skip_special_tokens=True)).strip():
        a0 += 1  # the blank line after the closing marker belongs to neither part
    answer = list(ids[a0:])
    extra = {"reasoning": backend.answer_text(ids[cut.r0 : cut.r1]), "reasoning_ids": list(ids[:a0]),
             "reasoning_logprobs": [float(x) for x in logprobs[:a0]], "reasoning_span": [cut.r0, cut.r1],
             "answer_tokens": [a0, len(ids)], "no_answer": cut.no_answer}
    return GenOutput(text=backend.answer_text(answer) if cut.no_answer is None else "", token_ids=answer,
                     token_logprobs=[float(x) for x in logprobs[a0:]], finish_reason=finish_reason, extra=extra)
