"""Reasoning and answer apart: where a reasoning model's output ends its thinking block and starts its answer.

A reasoning model writes its thinking between an opening and a closing marker (`<think>` ... `</think>` for Qwen3,
DeepSeek-R1 and their distillations; a chat template may itself open the block at the end of the prompt) and then
its answer. `split_ids` finds the split on the generated token ids (the markers' own ids, so no text is re-tokenised
and the answer's ids are exactly the ids that were generated); `split_text` does the same on text (an endpoint that
sends the thinking inline, a judge's reply). An output whose thinking block never closes has no answer: it was cut
off inside its reasoning (the token limit) or stopped there; `no_answer` says which, never an empty answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

NO_ANSWER = "no answer"  # how the reason of an output without an answer begins (scores, labels, reports)


@dataclass(frozen=True)
class Markers:
    """A model's thinking markers; `opens_in_prompt`: its chat template ends the prompt with `open` (the output
    starts inside the thinking block)."""

    open: str
    close: str
    opens_in_prompt: bool = False

    def spec(self) -> dict[str, object]:
        """What identifies the split (part of the model fingerprint, so of every stage key)."""
        return {"open": self.open, "close": self.close, "opens_in_prompt": self.opens_in_prompt}


@dataclass(frozen=True)
class IdSplit:
    """Token ranges of one output: reasoning ids `[r0, r1)` (markers excluded), answer ids `[a0, len)`; `a0` is
    the answer's token offset in the output. `no_answer` is set (and the answer range empty) when the thinking block
    never closed."""

    r0: int
    r1: int
    a0: int
    no_answer: str | None = None
    has_reasoning: bool = True  # False: no thinking block (the whole output is the answer)


def _find(ids: Sequence[int], sub: Sequence[int], start: int = 0) -> int:
    """First index >= start where `sub` occurs in `ids`, -1 when it does not."""
    n = len(sub)
    if n == 0:
        return -1
    for i in range(start, len(ids) - n + 1):
        if list(ids[i : i + n]) == list(sub):
            return i
    return -1


def no_answer_reason(finish_reason: str, limit: int | None) -> str:
    """Why an output without a closed thinking block has no answer, and which limit to raise."""
    if finish_reason == "length":
        at = f" ({limit} tokens)" if limit else ""
        return (f"{NO_ANSWER}: the output was cut off inside its reasoning at the token limit{at}; raise "
                "generation.max_new_tokens")
    return f"{NO_ANSWER}: the model stopped inside its reasoning without closing it"


def split_ids(ids: Sequence[int], open_ids: Sequence[int], close_ids: Sequence[int], *, opens_in_prompt: bool,
              finish_reason: str, limit: int | None = None) -> IdSplit:
    """The split of generated `ids` at the markers' ids. No marker at all (and none opened by the prompt): the
    whole output is the answer. An opening marker at the start (or one the prompt opened) without a closing one:
    no answer."""
    start = 0
    if len(open_ids) and list(ids[: len(open_ids)]) == list(open_ids):
        start, inside = len(open_ids), True
    else:
        inside = opens_in_prompt
    close = _find(ids, close_ids, start)
    if close >= 0:
        return IdSplit(r0=start, r1=close, a0=close + len(close_ids))
    if inside:
        return IdSplit(r0=start, r1=len(ids), a0=len(ids), no_answer=no_answer_reason(finish_reason, limit))
    return IdSplit(r0=0, r1=0, a0=0, has_reasoning=False)


@dataclass(frozen=True)
class TextSplit:
    reasoning: str | None  # None: the text holds no thinking block
    answer: str
    no_answer: str | None = None


def split_text(text: str, markers: Markers, *, finish_reason: str = "stop", limit: int | None = None) -> TextSplit:
    """The same split on text: reasoning between the markers (stripped), the answer after the closing marker."""
    body = text.lstrip()
    inside = markers.opens_in_prompt
    if body.startswith(markers.open):
        body, inside = body[len(markers.open) :], True
    at = body.find(markers.close)
    if at >= 0:
        return TextSplit(reasoning=body[:at].strip(), answer=body[at + len(markers.close) :].strip())
    if inside:
        return TextSplit(reasoning=body.strip(), answer="", no_answer=no_answer_reason(finish_reason, limit))
    return TextSplit(reasoning=None, answer=text.strip())


def template_markers(render: Callable[[], str], template: str, open_marker: str, close_marker: str,
                     *, force: bool) -> Markers | None:
    """A local model's markers: those given when `force`, else when its chat template emits both (auto); whether
    the template opens the block itself is read from a rendered generation prompt (`render`)."""
    if not force and not (open_marker in template and close_marker in template):
        return None
    return Markers(open=open_marker, close=close_marker, opens_in_prompt=render().rstrip().endswith(open_marker))


@dataclass(frozen=True)
class GivenParts:
    """A response given with the data, cut where a generated output is cut: `before` (blanks and the opening marker),
    `trace` (the thinking text as written), `between` (the closing marker and the blanks after it) and `answer`;
    `before + trace + between + answer` is the response up to trailing blanks. `no_answer`: the block never closes."""

    before: str
    trace: str
    between: str
    answer: str
    no_answer: str | None = None

    @property
    def reasoning(self) -> str:
        return self.trace.strip()


def given_no_answer(markers: Markers) -> str:
    return (f"{NO_ANSWER}: the given response opens a thinking block ({markers.open}) that never closes "
            f"({markers.close}); give the answer after the closing marker, or set reasoning.split: off to read the "
            "whole text as the answer")


def split_given(text: str, markers: Markers) -> GivenParts | None:
    """A given response split like a generated output (`split_text`'s rule, the prompt never opening the block):
    None when it holds no thinking block (the whole text is the answer)."""
    if split_text(text, Markers(markers.open, markers.close)).reasoning is None:
        return None
    lead = len(text) - len(text.lstrip())
    start = lead + len(markers.open) if text[lead:].startswith(markers.open) else lead
    close = text.find(markers.close, start)
    if close < 0:
        return GivenParts(before=text[:start], trace=text[start:], between="", answer="",
                          no_answer=given_no_answer(markers))
    after = close + len(markers.close)
    a0 = after + len(text[after:]) - len(text[after:].lstrip())
    return GivenParts(before=text[:start], trace=text[start:close], between=text[close:a0],
                      answer=text[a0:].rstrip())
