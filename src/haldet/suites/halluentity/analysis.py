"""HalluEntity's label statistics (paper section 3.2) and the proxy-model correlation of its appendix.

Label statistics, over every labelled entity of the cell (all splits: they describe the data), as tidy rows
(detector "(data)"):
- "Fig. 2": per POS tag and per entity type (spaCy, the same tags as the breakdowns in
  `haldet.evaluation.breakdowns`), the entities' count, share of all entities and hallucinated share.
- "position": the hallucinated share by the entity's position in its sentence (first / middle / last six words).
- "Fig. 4": the distribution of the per-response hallucination rate, in 5-point bins.
- "Table 4": the number of responses per rate group (<10%, 10-20%, >20%).
- "per response": entities and hallucinated share per response (mean, median, min, max).

Proxy correlation (Tables 7/8): with two or more proxy models on the same items, Pearson's r between the entity
scores each detector gets from two models, over the units both scored (item id + unit index), one row per
(detector, model pair); the paper correlates log-likelihood and entropy of a target model with a proxy's.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from haldet.evaluation.breakdowns import RATE_GROUPS, rate_group, unit_attributes
from haldet.schema import Instance
from haldet.suites.base import ACROSS_MODELS, DATA

FIG2_POS, FIG2_NER, POSITION, FIG4, TABLE4, PER_RESPONSE, CORRELATION = (
    "Fig. 2 (POS)", "Fig. 2 (NER)", "position", "Fig. 4", "Table 4", "per response", "Tables 7/8")
BIN_WIDTH = 0.05


PER_RESPONSE_STATS: dict[str, Callable[[list[float]], float]] = {
    "mean": statistics.fmean, "median": statistics.median, "min": min, "max": max}

def _row(table: str, **cols: Any) -> dict[str, Any]:
    return {"detector": DATA, "level": "entity", "table": table, **cols}


def hallucination_rate(instance: Instance) -> float | None:
    labels = [u.binary for u in instance.units_of("entity") if u.binary is not None]
    return sum(labels) / len(labels) if labels else None


def label_statistics(instances: Sequence[Instance]) -> list[dict[str, Any]]:
    units = [(inst, u) for inst in instances for u in inst.units_of("entity") if u.binary is not None]
    rows: list[dict[str, Any]] = []
    if units:
        tags = unit_attributes("entity", units)
        for table, tag in ((FIG2_POS, "pos"), (FIG2_NER, "ner"), (POSITION, "position")):
            total, bad = Counter(tags[tag]), Counter(t for t, (_, u) in zip(tags[tag], units, strict=True) if u.binary)
            for name, n in total.most_common():
                rows += [_row(table, tag=name, metric="n_entities", value=n, n=n),
                         _row(table, tag=name, metric="share", value=n / len(units), n=len(units)),
                         _row(table, tag=name, metric="hallucination_rate", value=bad[name] / n, n=n,
                              n_pos=bad[name])]
    rates = [(inst, r) for inst in instances if (r := hallucination_rate(inst)) is not None]
    n_bins = round(1 / BIN_WIDTH)
    bins = Counter(min(int(r / BIN_WIDTH), n_bins - 1) for _, r in rates)
    for b in range(n_bins):
        name = f"{100 * b * BIN_WIDTH:.0f}-{100 * (b + 1) * BIN_WIDTH:.0f}%"
        rows += [_row(FIG4, bin=name, metric="n_items", value=bins[b], n=len(rates)),
                 _row(FIG4, bin=name, metric="share", value=bins[b] / len(rates) if rates else None, n=len(rates))]
    groups = Counter(rate_group(inst, "entity") for inst, _ in rates)
    rows += [_row(TABLE4, rate_group=g, metric="n_items", value=groups[g], n=len(rates)) for g in RATE_GROUPS]
    per_item: dict[str, list[float]] = {"entities": [len(inst.units_of("entity")) for inst, _ in rates],
                "hallucinated_share": [r for _, r in rates]}
    for metric, values in per_item.items():
        floats = [float(v) for v in values]
        for stat, fn in PER_RESPONSE_STATS.items():
            rows.append(_row(PER_RESPONSE, statistic=stat, metric=metric,
                             value=float(fn(floats)) if floats else None, n=len(floats)))
    return rows


def pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson's r, None when undefined (fewer than 2 pairs or a constant side)."""
    if len(a) < 2 or np.std(a) == 0 or np.std(b) == 0:
        return None
    return float(np.corrcoef(a, b)[0, 1])


def proxy_correlation(unit_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tables 7/8 from the unit-score rows of a run (`unit_scores.csv`): per (dataset, detector, variant, level) and
    pair of models, Pearson's r over the units both models scored."""
    scores: dict[tuple[str, str, str, str], dict[str, dict[tuple[str, int], float]]] = {}
    for r in unit_rows:
        if r.get("score") is None or r.get("level") != "entity":
            continue
        key = (str(r["dataset"]), str(r["detector"]), str(r.get("variant") or ""), str(r["level"]))
        scores.setdefault(key, {}).setdefault(str(r["model"]), {})[(str(r["item_id"]), int(r["unit_index"]))] = \
            float(r["score"])
    rows = []
    for (dataset, detector, variant, level), by_model in scores.items():
        for a, b in combinations(sorted(by_model), 2):
            common = sorted(set(by_model[a]) & set(by_model[b]))
            x = np.array([by_model[a][k] for k in common])
            y = np.array([by_model[b][k] for k in common])
            corr = pearson(x, y)
            name = detector + (f"[{variant}]" if variant else "")
            rows.append({"dataset": dataset, "model": ACROSS_MODELS, "detector": name,
                         "level": level, "table": CORRELATION, "model_a": a, "model_b": b, "metric": "pearson",
                         "value": corr, "n": len(common), "note": "" if corr is not None else
                         "undefined: fewer than 2 common units or a constant score"})
    return rows
