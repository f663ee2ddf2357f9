"""Stratified train/val/test split over labelled items, deterministic for a seed."""

from __future__ import annotations

import random

SPLITS = ("train", "val", "test")


def stratified_split(labels: dict[str, int], fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
                     seed: int = 42) -> dict[str, list[str]]:
    """Split item ids per class in the given fractions (rounded, the remainder to test).

    Ids are sorted before the seeded shuffle, so the split depends only on (ids, labels, seed), never on the
    order items were generated in.
    """
    rng = random.Random(seed)
    out: dict[str, list[str]] = {name: [] for name in SPLITS}
    for cls in sorted(set(labels.values())):
        ids = sorted(i for i, y in labels.items() if y == cls)
        rng.shuffle(ids)
        n_train = round(len(ids) * fractions[0])
        n_val = round(len(ids) * fractions[1])
        out["train"] += ids[:n_train]
        out["val"] += ids[n_train : n_train + n_val]
        out["test"] += ids[n_train + n_val :]
    return {name: sorted(ids) for name, ids in out.items()}


def grouped_split(groups: dict[str, str], fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
                  seed: int = 42) -> dict[str, list[str]]:
    """Split item ids so that all items of one group (e.g. the summaries of one document) land in the same
    part: the sorted group keys are shuffled with the seed and cut in the given fractions (rounded, the
    remainder to test)."""
    rng = random.Random(seed)
    keys = sorted(set(groups.values()))
    rng.shuffle(keys)
    n_train = round(len(keys) * fractions[0])
    n_val = round(len(keys) * fractions[1])
    part = {k: "train" for k in keys[:n_train]} | {k: "val" for k in keys[n_train : n_train + n_val]}
    out: dict[str, list[str]] = {name: [] for name in SPLITS}
    for item, key in groups.items():
        out[part.get(key, "test")].append(item)
    return {name: sorted(ids) for name, ids in out.items()}
