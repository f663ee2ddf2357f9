"""Evidence-stage cost on the same items, one process, one model load: wall time of generate, sample (K=5),
auxiliary and features, the features/generate ratio (the aim: all feature groups together cost less than greedy
generation), and the bytes per item each stage stores at the defaults.

Runs the real stages (`Stage.ensure`) with every part computed (all feature groups and layers, the per-sample
hidden state), whatever a run's detectors would read, in a fresh temporary cell, so timings include batching,
hashing, HDF5 and JSONL writes. Prints JSON at the end; with --partial FILE, also rewrites FILE after every
stage (the cheap stages run first, so a slow machine still yields the features/generate ratio).
Usage: python benchmarks/stages.py [--n 50] [--max-new-tokens 64] [--model smollm2-135m] [--partial out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from haldet.config import RunConfig
from haldet.stages.plan import stage_class


def _bytes(root: Path, stage: str) -> int:
    total = (root / f"{stage}.jsonl").stat().st_size if (root / f"{stage}.jsonl").exists() else 0
    if (root / stage).is_dir():
        total += sum(p.stat().st_size for p in (root / stage).glob("*.h5"))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dataset", default="halueval_qa")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--partial", type=Path, default=None, help="Rewrite this JSON file after each stage.")
    args = parser.parse_args()

    from haldet.flow.cell import prepare_cell
    from haldet.stages.generate import attach_generations
    from haldet.store import RunStore

    config = RunConfig.model_validate({
        "limit": args.n, "device": args.device, "generation": {"max_new_tokens": args.max_new_tokens},
        "sample": {"max_new_tokens": args.max_new_tokens}})
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp))
        _, ctx, items = prepare_cell(config, store, args.dataset, args.model, lambda d, n: (lambda k: None), {})
        ctx.signals = None  # every configured part: all feature groups, the per-sample hidden state
        backend = ctx.backend
        backend.generate([items[0].prompt], max_new_tokens=2, batch_size=1)  # warm-up: weights loaded
        timings: dict[str, float] = {}
        root = store.cell(args.dataset, args.model).root
        report: dict[str, object] = {}
        for name in ("generate", "features", "auxiliary", "sample"):
            start = time.perf_counter()
            records = stage_class(name)(ctx).ensure(items)
            timings[name] = round(time.perf_counter() - start, 3)
            print(f"{name}: {timings[name]} s", file=sys.stderr, flush=True)
            if name == "generate":
                attach_generations(items, records)
            gaps = [r.get("logprob_gap") for r in stage_class("features")(ctx).records(items).values()]
            gaps = [g for g in gaps if g is not None]
            answer_tokens = sum(len(i.generation.token_ids) for i in items if i.generation)
            report = {
                "model": args.model, "dataset": args.dataset, "items": len(items), "device": str(backend.device),
                "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                "max_new_tokens": args.max_new_tokens, "mean_answer_tokens": round(answer_tokens / len(items), 1),
                "k": config.sample.k, "feature_groups": config.features.groups, "layers": config.features.layers,
                "seconds": dict(timings),
                "features_over_generate": (round(timings["features"] / timings["generate"], 3)
                                           if "features" in timings else None),
                "sample_over_generate": (round(timings["sample"] / timings["generate"], 3)
                                         if "sample" in timings else None),
                "bytes_per_item": {n: round(_bytes(root, n) / len(items)) for n in timings},
                "max_logprob_gap_teacher_forced_vs_generation": max(gaps) if gaps else None,
            }
            if args.partial is not None:
                args.partial.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
