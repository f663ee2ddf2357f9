"""The judge interface (DESIGN section 6): `judge(instance, generation) -> Label`.

A judge either decides or returns None ("not mine to decide"), so a cascade can try the next judge; an item
that no judge decides is labelled `invalid`, never guessed.
"""

from __future__ import annotations

from typing import ClassVar

from haldet.registry import Registry
from haldet.schema import Generation, Instance, Label


class Judge:
    """Labels one generated answer. `id` names the judge in every label it writes (e.g. `rule:short_answer`)."""

    name: ClassVar[str] = ""

    @property
    def id(self) -> str:
        return self.name

    def applies(self, instance: Instance) -> bool:
        """Whether this judge can decide items of this kind at all."""
        return True

    def judge(self, instance: Instance, generation: Generation) -> Label | None:
        raise NotImplementedError


JUDGES: Registry[type[Judge]] = Registry("judge", "haldet.judges")


def register(name: str):  # type: ignore[no-untyped-def]
    def decorate(cls: type[Judge]) -> type[Judge]:
        cls.name = name
        return JUDGES.register(name)(cls)

    return decorate
