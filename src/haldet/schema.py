"""The unified data model (DESIGN section 2): what every stage reads and writes.

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


class Instance(Record):
    """One benchmark item in the unified schema s = (t, i, c, q, omega, r+, r-)."""

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
        return self


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


class SpanLabel(Record):
    """A labelled piece of the response: a sentence, an entity or any span, by character offsets."""

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    category: Category
    text: str = ""
    kind: str = "span"  # "sentence", "entity", "span"

    @model_validator(mode="after")
    def _ordered(self) -> SpanLabel:
        if self.end < self.start:
            raise ValueError(f"span end {self.end} < start {self.start}")
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
