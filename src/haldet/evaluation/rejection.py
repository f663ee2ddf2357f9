"""Rejection curves, the Prediction-Rejection Ratio (PRR) and risk-coverage curves: one implementation.

A deployed detector rejects the answers it finds most suspicious. Quality is 1 for a correct answer and 0 for a
hallucinated one (label 1). Rejecting the k highest-scored of n answers keeps the m = n - k lowest-scored ones:

    rejection curve   q(m)  = mean quality of the m kept answers          (m = n, n-1, ..., 1)
    risk-coverage     r(m)  = 1 - q(m) at coverage m / n                 (selective risk)
    area              A(f)  = mean of q(m) over the K = int(f * n) largest m (rejection fractions 0 .. (K-1)/n)
    PRR(f)            = (A_detector(f) - A_random(f)) / (A_oracle(f) - A_random(f))

Tied scores are broken in expectation (every order of a tie equally likely), so the curve is deterministic: each
kept item of a tied group counts the group's share of correct answers. The random detector's curve is the accuracy
at every m (its exact expectation), the oracle keeps every correct answer before any hallucinated one. PRR is 1 for
the oracle, about 0 for a random score and about -1 for the inverted oracle (exactly -1 on balanced labels).

Everything is computed on rows of resample indices at once, so the bootstrap CIs of `haldet.evaluation.metrics`
reuse the stratified draws the other metrics use (stratified resamples keep the class counts, so the random and
oracle areas are the same in every resample).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

REJECTION_METRICS = ("prr", "prr_50", "rej_auc", "aurc")
MAX_REJECTION = {"prr": 1.0, "prr_50": 0.5}


def kept_correct(y: np.ndarray, s: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """[rows, n] expected number of correct answers among the m lowest-scored items of each resample (column m-1),
    ties broken in expectation. `y`: 1 = hallucinated; `s`: finite scores (higher = more suspicious)."""
    _, inv = np.unique(s, return_inverse=True)
    n_bins = int(inv.max()) + 1 if len(inv) else 0
    rows = idx.shape[0]
    bins = inv[idx]
    flat = (np.arange(rows)[:, None] * n_bins + bins).ravel()
    total = np.bincount(flat, minlength=rows * n_bins).reshape(rows, n_bins)
    correct = np.bincount(flat, weights=(y[idx] == 0).ravel().astype(np.float64),
                          minlength=rows * n_bins).reshape(rows, n_bins)
    ordered = np.sort(bins, axis=1)  # kept order: lowest score first
    # C(m) = correct answers in the bins below m's bin + m's share of its own bin's (whole numbers until the one
    # division, so a curve point at a tie boundary is exact)
    before_total = np.take_along_axis(np.cumsum(total, axis=1) - total, ordered, axis=1)
    before_correct = np.take_along_axis(np.cumsum(correct, axis=1) - correct, ordered, axis=1)
    own_total = np.take_along_axis(total, ordered, axis=1)
    own_correct = np.take_along_axis(correct, ordered, axis=1)
    m = np.arange(1, idx.shape[1] + 1)[None, :]
    return before_correct + (m - before_total) * own_correct / own_total


def rejection_curves(y: np.ndarray, s: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """[rows, n]: the mean quality of the m kept answers, column m-1 (m = 1..n)."""
    n = idx.shape[1]
    return kept_correct(y, s, idx) / np.arange(1, n + 1)[None, :]


def n_points(n: int, max_rejection: float) -> int:
    """Points of the curve an area up to `max_rejection` averages: int(max_rejection * n), at least one."""
    return max(1, int(max_rejection * n))


def area(curves: np.ndarray, max_rejection: float = 1.0) -> np.ndarray:
    """Per row, the mean of q(m) over the largest int(max_rejection * n) kept counts m."""
    k = n_points(curves.shape[1], max_rejection)
    return curves[:, curves.shape[1] - k :].mean(axis=1)


@lru_cache(maxsize=64)  # the same few (n_correct, n) for every block of a bootstrap
def oracle_area(n_correct: int, n: int, max_rejection: float = 1.0) -> float:
    """The oracle's area: it rejects every hallucinated answer first, so q(m) = min(m, n_correct) / m."""
    m = np.arange(n - n_points(n, max_rejection) + 1, n + 1)
    return float((np.minimum(m, n_correct) / m).mean())


def random_area(n_correct: int, n: int) -> float:
    """A random score's expected area: its expected curve is the accuracy at every m."""
    return n_correct / n


def prr(areas: np.ndarray, n_correct: int, n: int, max_rejection: float = 1.0) -> np.ndarray:
    """PRR of each area (NaN where the oracle is no better than random: one class only)."""
    rand, best = random_area(n_correct, n), oracle_area(n_correct, n, max_rejection)
    if best <= rand:
        return np.full(np.shape(areas), np.nan)
    return (np.asarray(areas) - rand) / (best - rand)


def rejection_metrics(y: np.ndarray, s: np.ndarray, idx: np.ndarray,
                      metrics: tuple[str, ...] = REJECTION_METRICS) -> dict[str, np.ndarray]:
    """Each rejection metric per row of `idx` (rows of resampled indices, or one row of all items). Every row has
    the same class counts (stratified resamples). `aurc` is the area under the risk-coverage curve (1 - rej_auc)."""
    y = np.asarray(y, dtype=int)
    return _from_curves(rejection_curves(y, s, idx), int((y[idx[0]] == 0).sum()), metrics)


def curves_from_counts(cp: np.ndarray, cn: np.ndarray) -> np.ndarray:
    """[rows, n]: the rejection curves of rows of per-rank counts of hallucinated (`cp`) and correct (`cn`) items
    (ranks ascending), equal bit for bit to `rejection_curves` of the same resamples: the kept items are the ranks
    repeated by their counts, not a sort."""
    rows, nb = cp.shape
    total = cp + cn
    n = int(total[0].sum())
    at = np.repeat(np.arange(rows * nb), total.ravel())  # the rank (flat) of each kept position
    before_total = (np.cumsum(total, axis=1) - total).ravel()[at].reshape(rows, n)
    before_correct = (np.cumsum(cn, axis=1) - cn).ravel()[at].reshape(rows, n)
    own_total, own_correct = total.ravel()[at].reshape(rows, n), cn.ravel()[at].reshape(rows, n)
    m = np.arange(1, n + 1)[None, :]
    return (before_correct + (m - before_total) * own_correct / own_total) / m


def pure_curves(total_desc: np.ndarray, correct_desc: np.ndarray, tiled: np.ndarray | None = None) -> np.ndarray:
    """`curves_from_counts` when each rank holds one class only (`correct_desc`, highest score first): the correct
    answers among the m kept are all correct answers less those among the n - m rejected, a running sum of whole
    numbers from the top, which is what the tie formula gives exactly."""
    rows, nb = total_desc.shape
    n = int(total_desc[0].sum())
    if tiled is None:  # correct_desc once per row of the block, flat (int64: summed fast)
        tiled = np.broadcast_to(correct_desc, (rows, nb)).ravel()
    flags = np.repeat(tiled, total_desc.ravel()).reshape(rows, n)
    rejected = np.zeros((rows, n + 1), dtype=np.int64)  # correct answers among the k highest-scored, k = 0..n
    np.cumsum(flags, axis=1, out=rejected[:, 1:])
    return (rejected[:, -1:] - rejected[:, n - 1 :: -1]) / _kept(n)


@lru_cache(maxsize=8)
def _kept(n: int) -> np.ndarray:
    """[1, n]: the kept counts m = 1..n as floats (exact), the divisor of every curve of n items."""
    out = np.arange(1, n + 1, dtype=np.float64)[None, :]
    out.setflags(write=False)
    return out


def _from_curves(curves: np.ndarray, n_correct: int, metrics: tuple[str, ...]) -> dict[str, np.ndarray]:
    n = curves.shape[1]
    out: dict[str, np.ndarray] = {}
    full = area(curves)
    for m in metrics:
        if m in MAX_REJECTION:
            out[m] = prr(area(curves, MAX_REJECTION[m]), n_correct, n, MAX_REJECTION[m])
        elif m == "rej_auc":
            out[m] = full
        elif m == "aurc":
            out[m] = 1.0 - full
    return out


def rejection_consumer(metrics: tuple[str, ...] = REJECTION_METRICS) -> Callable[[Any], dict[str, np.ndarray]]:
    """The rejection metrics of a bootstrap block (`haldet.evaluation.bootstrap.Block`): its per-rank counts, the
    scores ranked once (the class counts of the block's first resample, as `rejection_metrics` takes them)."""
    tiled: dict[int, np.ndarray] = {}  # per block height: the ranks' classes repeated for every row

    def consume(block: Any) -> dict[str, np.ndarray]:
        cp_d, cn_d = block.descending
        ranked = block.ranked
        if ranked.pure:
            rows = cp_d.shape[0]
            if rows not in tiled:
                tiled[rows] = np.tile(ranked.correct_desc, rows)
            curves = pure_curves(cp_d + cn_d, ranked.correct_desc, tiled[rows])
        else:
            curves = curves_from_counts(*block.counts)
        return _from_curves(curves, int(cn_d[0].sum()), metrics)
    return consume


def _harmonic(x: np.ndarray) -> np.ndarray:
    """H(x) = 1 + 1/2 + ... + 1/x (H(0) = 0), for whole x >= 0: a lookup in a cumulative table."""
    x = np.rint(np.asarray(x)).astype(np.int64)
    table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, int(x.max(initial=0)) + 1))])
    return table[x]


def _count_areas(total: np.ndarray, correct: np.ndarray, fractions: set[float]) -> dict[float, np.ndarray]:
    """Per row and rejection fraction f, the area A(f) from per-score counts, summed in closed form per score bin:
    within a bin starting after T0 kept units with C0 correct ones, q(m) = (C0 - T0 r) / m + r (r = the bin's
    correct share), so its sum over m in (lo, hi] is (C0 - T0 r)(H(hi) - H(lo)) + r (hi - lo)."""
    n = total.sum(axis=1)
    t0 = np.cumsum(total, axis=1) - total
    share = np.divide(correct, total, out=np.zeros(total.shape), where=total > 0)
    slope = np.cumsum(correct, axis=1) - correct - t0 * share
    hi = t0 + total
    h_hi = _harmonic(hi)
    out = {}
    for f in fractions:
        k = np.maximum(1, np.floor(f * n))
        lo = np.minimum(np.maximum(t0, (n - k)[:, None]), hi)
        out[f] = (slope * (h_hi - _harmonic(lo)) + share * (hi - lo)).sum(axis=1) / k
    return out


def rejection_from_counts(hallucinated: np.ndarray, correct: np.ndarray,
                          metrics: tuple[str, ...] = REJECTION_METRICS) -> dict[str, np.ndarray]:
    """The rejection metrics per row of per-distinct-score counts (columns in ascending score order) of hallucinated
    and correct units, e.g. a grouped bootstrap's resamples, whose rows differ in size and class counts (so the
    random and oracle areas are per row; the oracle's in closed form too). Counts are whole numbers. NaN for a row
    without both classes."""
    total = np.rint(np.asarray(hallucinated) + np.asarray(correct))
    good = np.rint(np.asarray(correct))
    n, n_correct = total.sum(axis=1), good.sum(axis=1)
    both = (n_correct > 0) & (n_correct < n)
    areas = _count_areas(total, good, {MAX_REJECTION.get(m, 1.0) for m in metrics})
    rand = np.divide(n_correct, n, out=np.zeros_like(n_correct), where=n > 0)
    out: dict[str, np.ndarray] = {}
    for name in metrics:
        f = MAX_REJECTION.get(name, 1.0)
        a = areas[f]
        if name == "rej_auc":
            out[name] = np.where(both, a, np.nan)
        elif name == "aurc":
            out[name] = np.where(both, 1.0 - a, np.nan)
        else:  # oracle: q(m) = 1 up to m = n_correct, then n_correct / m
            k = np.maximum(1, np.floor(f * n))
            start = n - k
            ones = np.clip(n_correct - start, 0, None)
            oracle = (ones + n_correct * (_harmonic(n) - _harmonic(np.maximum(n_correct, start)))) / k
            with np.errstate(invalid="ignore", divide="ignore"):
                out[name] = np.where(both & (oracle > rand), (a - rand) / (oracle - rand), np.nan)
    return out


@dataclass
class RiskCoverage:
    """The risk-coverage curve of one score on one set: selective risk (share of hallucinated answers among the
    kept) at each coverage m / n, m = 1..n, keeping the least suspicious first (ties in expectation)."""

    coverage: np.ndarray
    risk: np.ndarray
    n: int

    def at(self, kept: int) -> float:
        """Selective risk when `kept` answers are kept (NaN when none is)."""
        return float(self.risk[kept - 1]) if kept > 0 else float("nan")

    def sampled(self, points: int = 21) -> dict[str, list[float]]:
        """The curve at `points` evenly spaced coverages (the nearest kept count at or above each), for reports."""
        if self.n == 0:
            return {"coverage": [], "risk": []}
        kept = np.unique(np.clip(np.ceil(np.linspace(0, 1, points) * self.n).astype(int), 1, self.n))
        return {"coverage": [round(float(k / self.n), 6) for k in kept],
                "risk": [round(float(self.risk[k - 1]), 6) for k in kept]}


def risk_coverage(y: np.ndarray, suspicion: np.ndarray) -> RiskCoverage:
    """The risk-coverage curve of `suspicion` (higher = rejected first; NaN = never kept before a valid score, i.e.
    rejected first) for labels `y` (1 = hallucinated / unfaithful)."""
    y = np.asarray(y, dtype=int)
    s = np.asarray(suspicion, dtype=np.float64)
    n = len(y)
    if n == 0:
        return RiskCoverage(np.empty(0), np.empty(0), 0)
    s = np.where(np.isfinite(s), s, np.inf)
    kept = np.arange(1, n + 1)
    risk = (kept - kept_correct(y, s, np.arange(n)[None, :])[0]) / kept  # hallucinated among the kept, over kept
    return RiskCoverage(np.arange(1, n + 1) / n, risk, n)
