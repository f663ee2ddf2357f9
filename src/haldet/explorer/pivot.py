"""The results as a researcher reads them first: one row per detector of a cell, one column per metric (the tidy
table holds one row per metric, 35 rows for five detectors). Each value keeps its CI and caveat beside it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

KEY = ("run", "dataset", "model", "level", "detector", "variant")
FIRST = ("auroc", "aupr", "fpr95")  # the protocol's metrics lead; the rest keep the order they arrive in


def pivot(rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(metrics, table): a table row per (run, dataset, model, level, detector, variant) with `cells[metric]` the
    tidy row of that metric (value, ci_low, ci_high, n, note, thin, ...). Rows keep the order of their first metric."""
    metrics: dict[str, None] = {}
    table: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(row.get(k) or "" for k in KEY)
        entry = table.setdefault(key, {**dict(zip(KEY, key, strict=True)), "family": row.get("family", ""),
                                       "cells": {}})
        metric = str(row.get("metric", ""))
        metrics.setdefault(metric, None)
        entry["cells"][metric] = dict(row)
    order = [m for m in FIRST if m in metrics] + [m for m in metrics if m not in FIRST]
    return order, list(table.values())
