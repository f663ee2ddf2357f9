"""The names of what a run directory holds: the run-format version, the score logs' names and the cell files.

A score log's name is built and parsed here only (`ScoreLog`): `scores/<detector>` for OpenHalDet's protocol (one
score per answer), `scores/<detector>@<level>[@<training labels>]` for a suite's (one value per unit of a level;
a trained detector once per training-label set); the files beside a log share its name (`.calibrated.json`,
`.meta.json`, `.timings.json`).
"""

from __future__ import annotations

from dataclasses import dataclass

# The run directory's format, recorded in the manifest (`run_format`). 1: no version recorded (runs before it
# existed): no score-log path per detector, no record of the stage keys a cell used (readers fall back, each
# fallback marked "run_format 1"). 2: each detector entry names its score log (`log`), and each cell records the
# key of every label it evaluated (`keys.json`). 3: `keys.json` also records the keys of every evidence record the
# run used (generate, sample, auxiliary, features, verdict, ...; fallbacks for format 2 are marked "run_format 2").
RUN_FORMAT = 3
KEYS = "keys.json"  # per cell: {stage: {item id: the key (or keys) of the record(s) the run used}}
SCORES = "scores"
RESPONSE = "response"


@dataclass(frozen=True)
class ScoreLog:
    """One detector's score log in a cell: which detector, at which level, fitted on which training labels, and
    whether its name spells the level (a suite's logs do; OpenHalDet's scores one level and names only the
    detector)."""

    detector: str
    level: str = RESPONSE
    train_labels: str = ""
    spelled: bool = False

    @classmethod
    def of(cls, detector: str, level: str, train_labels: str, *, suite: bool) -> ScoreLog:
        """The log a protocol writes: a suite's names its level and training labels, OpenHalDet's only the
        detector."""
        if suite:
            return cls(detector, level or RESPONSE, train_labels or "", True)
        return cls(detector)

    @property
    def stem(self) -> str:
        """`perplexity`, `likelihood@sentence`, `saplma@response@noisy`."""
        if not self.spelled:
            return self.detector
        return f"{self.detector}@{self.level}" + (f"@{self.train_labels}" if self.train_labels else "")

    @property
    def name(self) -> str:
        """The log's name in its cell (`CellStore.log(name)`, `CellStore.lock(name)`): `scores/<stem>`."""
        return f"{SCORES}/{self.stem}"

    @property
    def path(self) -> str:
        """The log's file, relative to its cell: what the manifest records (`scores/<stem>.jsonl`)."""
        return f"{self.name}.jsonl"

    @property
    def calibrated(self) -> str:
        """The calibrated probabilities of the scores under one key (`scores/<stem>.calibrated.json`)."""
        return f"{self.name}.calibrated.json"

    @classmethod
    def parse(cls, text: str) -> ScoreLog:
        """A log from its stem, name or path (`det@sentence@noisy`, `scores/det`, `scores/det.jsonl`)."""
        stem = text.removeprefix(f"{SCORES}/").removesuffix(".jsonl")
        detector, _, rest = stem.partition("@")
        if not rest:
            return cls(detector)
        level, _, train = rest.partition("@")
        return cls(detector, level or RESPONSE, train, True)
