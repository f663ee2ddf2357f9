"""The judge interface: `judge(instance, generation) -> Label`.

A judge either decides (a `Label`), says it cannot decide this item (`Undecided`, with why: the next judge of a
cascade gets it; an item no judge decides is labelled `invalid`, never guessed), or, for judges that call a
service, fails after its retries (`JudgeFailure`: no label at all; the item goes to `annotate.failed.jsonl`
and a rerun retries it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from haldet.registry import Registry
from haldet.schema import Category, Generation, Instance, Label


@dataclass(frozen=True)
class Undecided:
    """This judge cannot decide this item (e.g. no final number found); `reason` ends up in an invalid label."""

    reason: str


@dataclass(frozen=True)
class JudgeFailure:
    """A judge that should decide could not get an answer (endpoint errors, malformed output after retries)."""

    id: str
    judge: str
    error: str
    attempts: int


Verdict = Label | Undecided | JudgeFailure
Pair = tuple[Instance, Generation]


class Judge:
    """Labels one generated answer. `id` names the judge in every label it writes (e.g. `rule:short_answer`)."""

    name: ClassVar[str] = ""
    deterministic: ClassVar[bool] = True  # rule and execution judges; the LLM judge is not
    version: ClassVar[int] = 1  # bump when the judge's rules change: cached labels are then recomputed

    @property
    def id(self) -> str:
        return self.name

    def fingerprint(self) -> Any:
        """Everything that changes this judge's labels (goes into the annotate cache key)."""
        return self.id

    def applies(self, instance: Instance) -> bool:
        """Whether this judge can decide items of this kind at all."""
        return True

    def local_models(self, task_types: frozenset[str]) -> list[str]:
        """The local models this judge loads to label items of these task types ("": a dataset whose rows name
        theirs), so that a missing one fails the run before the decoding, not at the first label."""
        return []

    def judge(self, instance: Instance, generation: Generation) -> Verdict:
        raise NotImplementedError

    def judge_many(self, pairs: Sequence[Pair], on_done: Callable[[int, Verdict], None]) -> None:
        """Judge many items, calling `on_done(index, verdict)` as each finishes (in any order), so callers can
        store every label the moment it exists. Judges with parallel work (execution, LLM) override this."""
        for index, (instance, generation) in enumerate(pairs):
            on_done(index, self.judge(instance, generation))

    def label(self, instance: Instance, category: Category, reasoning: str) -> Label:
        return Label(id=instance.id, category=category, reasoning=reasoning, judge=self.id)


JUDGES: Registry[type[Judge]] = Registry("judge", "haldet.judges")


register = JUDGES.register  # class decorator: @register("name")
