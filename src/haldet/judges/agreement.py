"""Agreement of two raters on the same items (two judges, or a claim labeller and the human labels): Cohen's
kappa and the confusion table.

kappa = (p_o - p_e) / (1 - p_e), with p_o the share of items both raters put in the same category and p_e the
agreement expected by chance from each rater's own category shares; computed by scikit-learn's
`cohen_kappa_score` (the one implementation in haldet). When both raters put every item in one and the same
category, p_e = 1 and kappa is undefined (NaN, reported as null / n/a), as scikit-learn has it. For judges, all
four categories count (an item one judge calls `invalid` and the other `correct` is a disagreement);
`binary=True` restricts to items both judges label correct/hallucination, the part that enters the metrics.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from sklearn.metrics import cohen_kappa_score

from haldet.schema import Category, Label

CATEGORIES = [c.value for c in Category]


@dataclass
class Agreement:
    judge_a: str
    judge_b: str
    n: int
    observed: float
    kappa: float
    categories: list[str]
    table: list[list[int]]  # rows: judge_a's category, columns: judge_b's
    disagreements: list[str] = field(default_factory=list)  # ids, first few

    def as_dict(self) -> dict[str, object]:
        return {"judge_a": self.judge_a, "judge_b": self.judge_b, "n": self.n,
                "observed_agreement": None if math.isnan(self.observed) else round(self.observed, 4),
                "kappa": None if math.isnan(self.kappa) else round(self.kappa, 4),
                "categories": self.categories, "confusion": self.table, "disagreements": self.disagreements}


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable],
                categories: Sequence[Hashable] | None = None) -> tuple[float, float]:
    """(kappa, observed agreement) of two equally long label lists (scikit-learn's `cohen_kappa_score` over
    `categories`, default the labels used); NaN for no items, and a NaN kappa when both raters use one and the same
    category for everything (p_e = 1: undefined)."""
    if len(a) != len(b):
        raise ValueError(f"label lists differ in length: {len(a)} vs {len(b)}")
    if not a:
        return math.nan, math.nan
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / len(a)
    if len(set(a) | set(b)) < 2:
        return math.nan, observed
    labels = list(categories) if categories is not None else sorted(set(a) | set(b), key=str)
    return float(cohen_kappa_score(list(a), list(b), labels=labels)), observed


def agreement(labels_a: Mapping[str, Label], labels_b: Mapping[str, Label], *, binary: bool = False,
              judge_a: str = "", judge_b: str = "") -> Agreement:
    """Compare two judges on the ids both labelled."""
    ids = sorted(set(labels_a) & set(labels_b))
    if binary:
        keep = {Category.CORRECT, Category.HALLUCINATION}
        ids = [i for i in ids if labels_a[i].category in keep and labels_b[i].category in keep]
    cats = [Category.CORRECT.value, Category.HALLUCINATION.value] if binary else CATEGORIES
    a = [labels_a[i].category.value for i in ids]
    b = [labels_b[i].category.value for i in ids]
    kappa, observed = cohen_kappa(a, b, cats)
    index = {c: k for k, c in enumerate(cats)}
    table = [[0] * len(cats) for _ in cats]
    for x, y in zip(a, b, strict=True):
        table[index[x]][index[y]] += 1
    return Agreement(judge_a=judge_a, judge_b=judge_b, n=len(ids), observed=observed, kappa=kappa,
                     categories=cats, table=table,
                     disagreements=[i for i, x, y in zip(ids, a, b, strict=True) if x != y][:20])
