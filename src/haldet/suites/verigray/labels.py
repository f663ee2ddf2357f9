"""VeriGray's seven faithfulness classes, their order, their aliases, and the binary view of protocol 1.

The paper orders classes by faithfulness degree: Contradicting < Fabricated < Ambiguous < No-Fact <
Out-Dependent < Implicitly-Supported < Explicitly-Supported; the grade of a class is its position (0..6).
Aliases: the detector prompt of the paper calls Contradicting "Inconsistent" and Implicitly-Supported
"Generally-Supported". An Ambiguous sentence may list the classes of its readings ("Contradicting /
Explicitly-Supported"): it stays Ambiguous (grade 2) and keeps every reading; it is never mapped to one of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLASSES = ("Contradicting", "Fabricated", "Ambiguous", "No-Fact", "Out-Dependent", "Implicitly-Supported",
           "Explicitly-Supported")
CONTRADICTING, FABRICATED, AMBIGUOUS, NO_FACT, OUT_DEPENDENT, IMPLICIT, EXPLICIT = range(7)
UNFAITHFUL = frozenset({CONTRADICTING, FABRICATED})
FAITHFUL = frozenset({IMPLICIT, EXPLICIT})
NOT_SURE = frozenset({AMBIGUOUS, NO_FACT, OUT_DEPENDENT})  # left out of protocol 1 (with No-Fact)
ALIASES = {"Inconsistent": CONTRADICTING, "Generally-Supported": IMPLICIT}
READING_SEPARATORS = re.compile(r"\s*[/|;]\s*")


def _key(text: str) -> str:
    """Spelling-insensitive key: 'No-Fact', 'no fact', 'NO_FACT' and 'nofact' are the same class."""
    return re.sub(r"[^a-z]", "", text.lower())


_LOOKUP = {_key(name): grade for grade, name in enumerate(CLASSES)} | {_key(a): g for a, g in ALIASES.items()}


class UnknownLabel(ValueError):
    """An annotation that names no VeriGray class (nor an alias)."""


def grade_of(name: str) -> int:
    """The grade (0..6) of one class name or alias; `UnknownLabel` otherwise."""
    grade = _LOOKUP.get(_key(name))
    if grade is None or not _key(name):
        raise UnknownLabel(f"unknown VeriGray label {name!r} (known: {', '.join(CLASSES)}; aliases: "
                           f"{', '.join(ALIASES)})")
    return grade


@dataclass(frozen=True)
class Annotation:
    """A sentence's gold label: its grade and, for Ambiguous sentences, the classes of its readings."""

    grade: int
    readings: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return CLASSES[self.grade]

    @property
    def binary(self) -> int | None:
        """Protocol 1's gold label: 1 = Unfaithful, 0 = Faithful, None = left out (Not Sure, No-Fact)."""
        return 1 if self.grade in UNFAITHFUL else 0 if self.grade in FAITHFUL else None


def parse_annotation(text: str) -> Annotation:
    """One annotation string. Several classes separated by '/' (or '|', ';') are the readings of an Ambiguous
    sentence; a lone 'Ambiguous' has no listed readings. Unknown names raise `UnknownLabel`."""
    parts = [p for p in READING_SEPARATORS.split(str(text).strip()) if p]
    if not parts:
        raise UnknownLabel("empty VeriGray label")
    grades = [grade_of(p) for p in parts]
    if len(grades) == 1:
        return Annotation(grades[0])
    if AMBIGUOUS in grades:
        raise UnknownLabel(f"label {text!r}: the readings of an Ambiguous sentence must be other classes")
    return Annotation(AMBIGUOUS, tuple(sorted(set(grades))))
