"""Seconds `haldet.evaluation.metrics.evaluate` takes for one detector on one cell, split into the detection metrics
(AUROC/AUPR/FPR@95) and the rejection metrics (PRR, PRR@50, rejection AUC, AURC) on the same stratified resamples,
and the calibration rows (ECE, Brier), for test sets of several sizes. Synthetic labels and scores (40% positive,
scores rounded to give ties). Best of `--repeat` runs per size (least disturbed on a shared machine). Prints JSON.
Usage:
  python benchmarks/metrics.py [--sizes 100,400,2000] [--n-boot 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import numpy as np

from haldet.evaluation.bootstrap import stratified_draws
from haldet.evaluation.calibration import evaluate_calibrated
from haldet.evaluation.metrics import DETECTION_METRICS, metrics_on_resamples
from haldet.evaluation.rejection import REJECTION_METRICS


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def time_size(n: int, n_boot: int, repeat: int) -> dict[str, float]:
    rng = np.random.default_rng(n)
    y = (rng.random(n) < 0.4).astype(int)
    s = np.round(y + rng.normal(size=n), 2)
    idx = stratified_draws(y, n_boot, seed=42)
    p = 1 / (1 + np.exp(-s))
    return {"n": n,
            "detection_s": best_of(repeat, lambda: metrics_on_resamples(y, s, idx, DETECTION_METRICS)),
            "rejection_s": best_of(repeat, lambda: metrics_on_resamples(y, s, idx, REJECTION_METRICS)),
            "calibration_s": best_of(repeat, lambda: evaluate_calibrated(y, p, n_boot=n_boot))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,400,2000")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out = {"n_boot": args.n_boot, "repeat": args.repeat, "loadavg": os.getloadavg(), "sizes": []}
    for n in (int(x) for x in args.sizes.split(",")):
        out["sizes"].append(time_size(n, args.n_boot, args.repeat))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
