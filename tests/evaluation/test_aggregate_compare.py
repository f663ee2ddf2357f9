"""Paired bootstrap of two detectors: hand-checked point values, paired CI narrower than independent ones."""

import numpy as np
import pytest

from haldet.evaluation.compare import paired_bootstrap
from haldet.evaluation.metrics import evaluate


def test_point_difference_and_dropped_items():
    y = np.array([0, 0, 1, 1, 1])
    a = np.array([0.1, 0.4, 0.35, 0.8, np.nan])   # on the 4 shared items: AUROC 0.75
    b = np.array([0.9, 0.1, 0.2, 0.3, 0.5])       # on the same 4: pairs (.2>.9 no)(.2>.1)(.3>.9 no)(.3>.1) -> 0.5
    cmp = paired_bootstrap(y, a, b, a="A", b="B", n_boot=200)
    assert (cmp.n, cmp.n_pos, cmp.n_dropped) == (4, 2, 1)
    assert cmp.auroc_a == pytest.approx(0.75) and cmp.auroc_b == pytest.approx(0.5)
    assert cmp.diff == pytest.approx(0.25)
    assert cmp.ci_low <= cmp.diff <= cmp.ci_high


def test_paired_ci_reflects_correlation():
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(80), np.zeros(120)].astype(int)
    base = y * 1.2 + rng.normal(size=y.size)
    a = base + 0.3 * rng.normal(size=y.size)
    b = base + 0.3 * rng.normal(size=y.size)        # nearly the same detector
    cmp = paired_bootstrap(y, a, b, n_boot=500, seed=1)
    width_pair = cmp.ci_high - cmp.ci_low
    ea = {m.metric: m for m in evaluate(y, a, n_boot=500, seed=1)}["auroc"]
    assert width_pair < 0.5 * (ea.ci_high - ea.ci_low)   # pairing removes the shared item variance
    assert cmp.p_value > 0.05                             # no real difference
    better = paired_bootstrap(y, base * 3 + rng.normal(size=y.size) * 0.1, rng.normal(size=y.size), n_boot=300)
    assert better.ci_low > 0 and better.p_value < 0.01


def test_one_class_gives_no_number():
    cmp = paired_bootstrap(np.ones(4, dtype=int), np.arange(4.0), np.arange(4.0), n_boot=10)
    assert cmp.diff is None and "one class" in cmp.note


def test_cache_reuses_reference_resamples_with_identical_results():
    rng = np.random.default_rng(3)
    y = np.r_[np.ones(30), np.zeros(40)].astype(int)
    ref = y + rng.normal(size=70)
    others = [y * 0.5 + rng.normal(size=70) for _ in range(3)]
    cache: dict = {}
    cached = [paired_bootstrap(y, ref, o, a="ref", n_boot=100, _cache=cache) for o in others]
    plain = [paired_bootstrap(y, ref, o, a="ref", n_boot=100) for o in others]
    assert len(cache) == 1
    assert [(c.ci_low, c.ci_high, c.p_value) for c in cached] == [(c.ci_low, c.ci_high, c.p_value) for c in plain]
