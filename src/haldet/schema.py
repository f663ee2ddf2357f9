"""The unified data model: what every stage reads and writes.

Everything here is a pydantic v2 model so a malformed record fails loudly with the field that is wrong,
and every model round-trips through one JSON line (`to_json_line` / `from_json_line`).
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Access(StrEnum):
    """How much of the model a detector needs to see."""

    BLACK = "black"
    GRAY = "gray"
    WHITE = "white"


class Category(StrEnum):
    """Response-level label. Only `correct` and `hallucination` enter the metrics."""

    CORRECT = "correct"
    HALLUCINATION = "hallucination"
    ABSTENTION = "abstention"
    INVALID = "invalid"


class Record(BaseModel):
    """Base for every stored record: strict fields, one JSON line each."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    def to_json_line(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json_line(cls, line: str) -> Self:
        return cls.model_validate_json(line)


LABEL_META = "labels"  # the meta entry (of a unit or an instance) holding label details: hidden from detectors
UNIT_KINDS = ("token", "entity", "sentence", "clause", "claim", "span")  # unit levels below `response`
LEVELS = ("response", *UNIT_KINDS)
SPLIT_NAMES = ("train", "val", "test")


class SpanLabel(Record):
    """A unit of a response, by character offsets `[start, end)` into it: an entity, a sentence, a claim, any span.

    `category` is the binary label (`hallucination` / `correct`; `invalid` = unlabelled, left out of metrics and
    counted). `grade` is an optional ordinal label (index into the dataset's ordered grade names, e.g. VeriGray's
    seven classes; 0 = the best) with its name in `grade_name`. `meta` keeps source-specific extras (a claim's
    evidence, the annotator's tag).
    """

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    category: Category
    text: str = ""
    kind: str = "span"  # one of UNIT_KINDS
    grade: int | None = Field(None, ge=0)
    grade_name: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ordered(self) -> SpanLabel:
        if self.end < self.start:
            raise ValueError(f"span end {self.end} < start {self.start}")
        if self.kind not in UNIT_KINDS:
            raise ValueError(f"unit kind {self.kind!r} is not one of {', '.join(UNIT_KINDS)}")
        return self

    @property
    def binary(self) -> int | None:
        """1 = hallucinated, 0 = not, None = unlabelled."""
        return {Category.HALLUCINATION: 1, Category.CORRECT: 0}.get(self.category)


Unit = SpanLabel  # the name suites use: a labelled unit of a (provided) response


class Instance(Record):
    """One benchmark item in the unified schema s = (t, i, c, q, omega, r+, r-).

    Suites whose answers ship with the data also set `response` (the text the generate stage teacher-forces
    through the proxy model instead of generating), its `units` (offsets into `response`, with labels), an optional
    response-level label shipped with the data (`response_label`, plus named alternative label columns in
    `label_variants`, e.g. TRIVIA+'s noisy labels) and `split` when the dataset ships its own train/val/test split.
    """

    id: str
    dataset: str
    scenario: str
    task_type: str
    instruction: str = ""
    context: str = ""
    question: str = ""
    options: dict[str, str] = Field(default_factory=dict)
    references: list[str] = Field(default_factory=list)
    incorrect: list[str] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)
    source: dict[str, Any] = Field(default_factory=dict)
    response: str | None = None
    units: list[SpanLabel] = Field(default_factory=list)
    response_label: Category | None = None
    label_variants: dict[str, Category] = Field(default_factory=dict)
    split: str | None = None

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if value.count("/") < 2 or any(not part for part in value.split("/", 2)):
            raise ValueError(f"instance id {value!r} must look like '<dataset>/<split>/<native id>'")
        return value

    @model_validator(mode="after")
    def _has_input(self) -> Instance:
        if not (self.question or self.context or self.instruction):
            raise ValueError(f"instance {self.id}: needs at least one of question, context, instruction")
        if self.split is not None and self.split not in SPLIT_NAMES:
            raise ValueError(f"instance {self.id}: split {self.split!r} is not one of {', '.join(SPLIT_NAMES)}")
        if self.units and self.response is None:
            raise ValueError(f"instance {self.id}: units need the response they point into")
        for unit in self.units:
            if self.response is not None and unit.end > len(self.response):
                raise ValueError(f"instance {self.id}: unit [{unit.start}, {unit.end}) ends past the response "
                                 f"({len(self.response)} characters)")
        return self

    def units_of(self, level: str) -> list[SpanLabel]:
        """The units scored at `level`: those of that kind, or the whole response as one unit at `response` level
        (labelled by `response_label`, else hallucinated when any unit is)."""
        if level != "response":
            return [u for u in self.units if u.kind == level]
        text = self.response or ""
        category = self.response_label
        if category is None and self.units:
            labels = [u.binary for u in self.units]
            category = (Category.HALLUCINATION if 1 in labels else
                        Category.CORRECT if labels and all(x == 0 for x in labels) else Category.INVALID)
        return [SpanLabel(start=0, end=len(text), category=category or Category.INVALID, text=text, kind="span")]

    def without_labels(self) -> Instance:
        """The instance a scoring view shows: units keep their offsets and text, never their labels (nor the
        `LABEL_META` entry of their meta or of the instance's, where adapters keep label details)."""
        if not (self.units or self.response_label is not None or self.label_variants or LABEL_META in self.meta):
            return self
        units = [u.model_copy(update={"category": Category.INVALID, "grade": None, "grade_name": "",
                                      "meta": {k: v for k, v in u.meta.items() if k != LABEL_META}})
                 for u in self.units]
        meta = {k: v for k, v in self.meta.items() if k != LABEL_META}
        return self.model_copy(update={"units": units, "response_label": None, "label_variants": {}, "meta": meta})


class Generation(Record):
    """The primary (greedy) answer to one rendered prompt, with the token evidence it came with."""

    id: str
    prompt: str
    response: str
    token_ids: list[int]
    token_logprobs: list[float]
    finish_reason: str
    n_tokens: int
    model: str
    seconds: float = 0.0
    # token strings from a remote backend (which gives no ids): then token_ids is empty, token_logprobs is aligned
    # with token_text or empty (the endpoint sent no log-probs), and n_tokens is what the endpoint billed
    token_text: list[str] | None = None
    provided: bool = False  # the response came with the data and was teacher-forced, not generated
    skipped: str | None = None  # why the model read no token of a given response (it exceeds the model's context)
    # a reasoning model's output (haldet.text.reasoning): `response`, `token_ids` and `token_logprobs` hold the answer
    # alone; `reasoning` the thinking text (None: no thinking block); `reasoning_ids`/`reasoning_logprobs` every
    # output token before the answer (markers included), its context in the output; `reasoning_span` [r0, r1) the
    # thinking tokens among them and `answer_tokens` [a0, a1) the answer's token offsets in the whole output
    reasoning: str | None = None
    reasoning_ids: list[int] = Field(default_factory=list)
    reasoning_logprobs: list[float] = Field(default_factory=list)
    reasoning_span: list[int] | None = None
    answer_tokens: list[int] | None = None
    no_answer: str | None = None  # why the output has no answer (cut off inside its reasoning): never scored

    def output_text(self) -> str:
        """The whole output as the model wrote it (reasoning block, then answer); the answer without reasoning."""
        if self.reasoning is None:
            return self.response
        return f"{self.reasoning}\n\n{self.response}".strip()

    @model_validator(mode="after")
    def _aligned(self) -> Generation:
        if self.token_text is not None:
            if self.token_ids or (self.token_logprobs and len(self.token_logprobs) != len(self.token_text)):
                raise ValueError(f"generation {self.id}: token_text ({len(self.token_text)}) and token_logprobs "
                                 f"({len(self.token_logprobs)}) must agree, and a remote answer has no token ids")
            return self
        if len(self.token_ids) != len(self.token_logprobs) or self.n_tokens != len(self.token_ids):
            raise ValueError(
                f"generation {self.id}: {len(self.token_ids)} token ids, {len(self.token_logprobs)} "
                f"logprobs and n_tokens={self.n_tokens} must agree"
            )
        return self


class Label(Record):
    """The judge's verdict on one generation; optional finer-grained labels for span suites."""

    id: str
    category: Category
    reasoning: str = ""
    judge: str
    spans: list[SpanLabel] = Field(default_factory=list)


class Score(Record):
    """One detector's score for one item. Higher = more likely hallucinated; NaN = invalid, with a reason."""

    detector: str
    id: str
    value: float
    reason: str = ""

    @field_validator("value", mode="before")
    @classmethod
    def _null_is_nan(cls, value: Any) -> Any:
        """JSON has no NaN: an invalid score is written as null and read back as NaN."""
        return math.nan if value is None else value

    @model_validator(mode="after")
    def _invalid_has_reason(self) -> Score:
        if math.isnan(self.value) and not self.reason:
            raise ValueError(f"score of {self.detector} on {self.id} is NaN without a reason")
        return self
