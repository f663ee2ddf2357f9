"""Fit and score times of the white-box detectors on synthetic signals shaped like a real cell.

Default shapes follow SmolLM2-135M (30 layers + embeddings, hidden size 576) and a 200-item cell
(120 train / 40 val / 40 test). Prints one JSON object: seconds per detector (fit, score), device, shapes.
    python benchmarks/whitebox_fit.py [--n 200] [--layers 31] [--dim 576] [--samples 5]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from haldet.detectors.base import DETECTORS
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView

DETECTOR_SETTINGS = [("eigenscore", {}), ("ccs", {}), ("haloscope", {}), ("haloscope", {"variant": "label_guided"}),
                     ("saplma", {}), ("mind", {}), ("sep", {"variant": "accuracy"}), ("prism", {}),
                     ("icr_probe", {})]


def build(n: int, layers: int, dim: int, k: int, seed: int = 0) -> SignalView:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(int)
    w = rng.normal(size=dim) / np.sqrt(dim)
    shift = (2 * y - 1)[:, None, None] * w * 3

    def states(*lead: int) -> np.ndarray:
        return (rng.normal(size=(n, *lead, layers, dim)) + shift.reshape((n,) + (1,) * len(lead) + (1, dim))
                ).astype(np.float16)

    signals = {Signal.HIDDEN_LAST: states(), Signal.HIDDEN_MEAN: states(), Signal.PRISM_FEATURES: states(),
               Signal.SEP_FEATURES: states(2), Signal.CCS_FEATURES: states(2),
               Signal.ICR_FEATURES: rng.normal(size=(n, layers - 1, 4)).astype(np.float16),
               Signal.SAMPLE_HIDDEN: rng.normal(size=(n, k, dim)).astype(np.float16)}
    ids = [f"bench/test/{i}" for i in range(n)]
    pos = {i: j for j, i in enumerate(ids)}
    inst = [Instance(id=i, dataset="bench", scenario="qa_open", task_type="short_answer", question="q") for i in ids]
    gens = [Generation(id=i, prompt="p", response="a", token_ids=[1], token_logprobs=[-0.1], finish_reason="stop",
                       n_tokens=1, model="m") for i in ids]
    return SignalView(ids=ids, instances=inst, generations=gens, labels=y,
                      loader=lambda s, wanted: [signals[s][pos[i]] for i in wanted])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--layers", type=int, default=31)
    ap.add_argument("--dim", type=int, default=576)
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    view = build(args.n, args.layers, args.dim, args.samples)
    order = np.random.default_rng(42).permutation(args.n)
    a, b = int(0.6 * args.n), int(0.8 * args.n)
    train, val = view.subset(order[:a], with_labels=True), view.subset(order[a:b], with_labels=True)
    test = view.subset(order[b:], with_labels=False)
    results = {}
    for name, params in DETECTOR_SETTINGS:
        det = DETECTORS.get(name)(**params)
        start = time.perf_counter()
        if det.trains:
            det.fit(train, val)
        fit_s = time.perf_counter() - start
        start = time.perf_counter()
        scores = det.score(test)
        label = name + (f"[{params['variant']}]" if "variant" in params else "")
        results[label] = {"fit_s": round(fit_s, 3), "score_s": round(time.perf_counter() - start, 4),
                          "valid": int(np.isfinite(scores.values).sum())}
    print(json.dumps({"device": "cuda" if torch.cuda.is_available() else "cpu", "n_items": args.n,
                      "layer_rows": args.layers, "dim": args.dim, "samples": args.samples,
                      "detectors": results}, indent=2))


if __name__ == "__main__":
    main()
