"""VeriGray's data analyses (no detector involved): the class distribution per generator (the paper's Fig. 2) and
the transitions between sentences' classes of one summary as a Markov chain: Fig. 3 at the polarity level
(Faithful / Unfaithful / Others) between consecutive sentences, Fig. 6 (appendix C) the same per generating model
and between sentences k = 2, 3, 4 apart, and haldet's own matrix over the seven classes.

A transition is counted between sentence i and i+k of the same summary (k = 1 unless said; all splits: these
describe the data). Row `from` -> column (metric) `to` holds p = count / (transitions out of `from`) with a 95%
Wilson interval (each cell of a row is a binomial proportion). Rows: tidy result rows of the suite's tables
"Fig. 2", "Fig. 3", "Fig. 6" (its `view` column: `generator=NAME` or `k=2|3|4`) and "7-class transitions"
(detector "(data)"); in Fig. 2 a generator's line holds each class's share (count in `n_pos`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from haldet.schema import Instance
from haldet.suites.base import DATA
from haldet.suites.verigray.labels import CLASSES, FAITHFUL, UNFAITHFUL

FIG2, FIG3, FIG6, SEVEN = "Fig. 2", "Fig. 3", "Fig. 6", "7-class transitions"
STEPS = (2, 3, 4)  # Fig. 6: transitions between sentences this many apart
POLARITIES = ("Faithful", "Unfaithful", "Others")
Z95 = 1.959963984540054


def polarity(degree: int) -> str:
    """Fig. 3's merge: Explicitly/Implicitly-Supported = Faithful, Contradicting/Fabricated = Unfaithful."""
    return "Faithful" if degree in FAITHFUL else "Unfaithful" if degree in UNFAITHFUL else "Others"


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of the proportion k/n (NaNs when n = 0)."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def sentence_classes(instance: Instance) -> list[str]:
    """The gold class names of a summary's sentences, in order (the core stores grade = 6 - degree)."""
    units = sorted(instance.units_of("sentence"), key=lambda u: u.start)
    return [u.grade_name or CLASSES[len(CLASSES) - 1 - int(u.grade or 0)] for u in units]


def class_distribution(instances: Sequence[Instance]) -> list[dict[str, Any]]:
    """Fig. 2: per generator, the share of each class (count in `n_pos`, sentences in `n`); generators in
    descending order of unfaithful share, as the paper arranges them."""
    counts: dict[str, Counter[str]] = {}
    for inst in instances:
        counts.setdefault(str(inst.meta.get("generator", "")), Counter()).update(sentence_classes(inst))
    unfaithful = {CLASSES[g] for g in UNFAITHFUL}

    def share(gen: str) -> float:
        total = sum(counts[gen].values())
        return sum(counts[gen][c] for c in unfaithful) / total if total else 0.0

    rows = []
    for gen in sorted(counts, key=lambda g: (-share(g), g)):
        total = sum(counts[gen].values())
        rows += [{"detector": DATA, "level": "sentence", "table": FIG2, "generator": gen, "metric": name,
                  "value": counts[gen][name] / total if total else None, "n": total, "n_pos": counts[gen][name]}
                 for name in CLASSES]
    return rows


def transition_rows(instances: Sequence[Instance], *, merge: bool, step: int = 1) -> list[dict[str, Any]]:
    """The Markov transition matrix between sentences `step` apart, at the polarity level (merge=True) or over the
    seven classes, as rows without their table."""
    states = POLARITIES if merge else CLASSES
    pairs: Counter[tuple[str, str]] = Counter()
    for inst in instances:
        seq = sentence_classes(inst)
        if merge:
            seq = [polarity(CLASSES.index(c)) for c in seq]
        pairs.update(zip(seq, seq[step:], strict=False))
    rows = []
    for a in states:
        out = sum(pairs[(a, b)] for b in states)
        for b in states:
            low, high = wilson(pairs[(a, b)], out)
            rows.append({"detector": DATA, "level": "sentence", "from": a, "metric": b,
                         "value": pairs[(a, b)] / out if out else None, "ci_low": low if out else None,
                         "ci_high": high if out else None, "n": out, "n_pos": pairs[(a, b)],
                         "note": "" if out else f"no transition out of {a}"})
    return rows


def transitions(instances: Sequence[Instance], *, merge: bool) -> list[dict[str, Any]]:
    """Fig. 3 (merge=True: polarities) or the seven-class matrix (merge=False), consecutive sentences."""
    return [{**r, "table": FIG3 if merge else SEVEN} for r in transition_rows(instances, merge=merge)]


def fig6(instances: Sequence[Instance]) -> list[dict[str, Any]]:
    """Fig. 6: the polarity transitions of each generator's summaries (`view` generator=NAME, consecutive
    sentences) and of all summaries between sentences k = 2, 3, 4 apart (`view` k=K)."""
    by_gen: dict[str, list[Instance]] = {}
    for inst in instances:
        by_gen.setdefault(str(inst.meta.get("generator", "")), []).append(inst)
    rows = [{**r, "table": FIG6, "view": f"generator={gen}"} for gen in sorted(by_gen)
            for r in transition_rows(by_gen[gen], merge=True)]
    return rows + [{**r, "table": FIG6, "view": f"k={k}"} for k in STEPS
                   for r in transition_rows(instances, merge=True, step=k)]


def analysis_rows(instances: Sequence[Instance]) -> list[dict[str, Any]]:
    return (class_distribution(instances) + transitions(instances, merge=True) + fig6(instances)
            + transitions(instances, merge=False))
