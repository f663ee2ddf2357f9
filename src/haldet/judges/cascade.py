"""The default judge: deterministic judges where the task allows, then the next judge; `invalid` when none
decides. Which judge labelled each item is recorded in the label."""

from __future__ import annotations

from typing import Any

from haldet.config import JudgeConfig
from haldet.judges.base import JUDGES, Judge
from haldet.schema import Category, Generation, Instance, Label

RULE_JUDGES = ["rule:short_answer"]


class Cascade:
    def __init__(self, judges: list[Judge]) -> None:
        self.judges = judges

    @classmethod
    def from_config(cls, config: JudgeConfig) -> Cascade:
        names = RULE_JUDGES
        return cls([JUDGES.get(name, where="--judge")() for name in names])

    def fingerprint(self) -> list[Any]:
        return [j.id for j in self.judges]

    def judge(self, instance: Instance, generation: Generation) -> Label:
        for judge in self.judges:
            if judge.applies(instance):
                label = judge.judge(instance, generation)
                if label is not None:
                    return label
        return Label(id=instance.id, category=Category.INVALID, judge="cascade",
                     reasoning=f"no configured judge can decide task type {instance.task_type!r}")
