"""What one forward call of the target model costs, by its shape: a decoding step of R rows over C cached positions,
and a pass that reads W new tokens in each of R rows (the prompts read before decoding, or the statements and
follow-up questions read after each answer's cache). A run's time is these calls (benchmarks/protocol.py counts
them per stage: `model_steps`, `model_passes`), so this says what each kind costs on this machine: a token decoded
in a step against a token read in a pass.

The calls are the lean loop's own (`haldet.backends.hf.pool`: `prefill`, `extend`, `Pool.step`, the growing KV
cache, the last position's logits only), on random token ids of the model's vocabulary (no padding). Each figure
is the fastest of `--repeat` timings (on a shared machine the least disturbed one); for a step, of the medians of
`--repeat` runs of `--steps` steps. Prints JSON. Usage:
  python benchmarks/forward_costs.py [--rows 8,16,32,64,96] [--context 200] [--steps 8]
                                     [--prompt 8x160] [--after 16x77] [--repeat 3] [--threads N]
                                     [--store NAME] [--check NAME]
`--store NAME` writes benchmarks/results/NAME.json, from which benchmarks/render_docs.py renders docs/speed.md's
forward-cost table; `--check NAME` exits 1 when a figure drifted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import finish  # benchmarks/results.py: stored figures, --store and --check

from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.pool import Pool, extend, prefill
from haldet.util.threads import available_cores, configure_threads


def _ids(model: Any, rows: int, width: int, gen: torch.Generator) -> list[list[int]]:
    return torch.randint(0, model.config.vocab_size, (rows, width), generator=gen).tolist()


def step_seconds(model: Any, rows: int, context: int, steps: int, repeat: int, gen: torch.Generator) -> float:
    """One decoding step of `rows` rows after about `context` cached positions each: of `repeat` runs of `steps`
    steps after one prompt read, the smallest median (the context grows by a position a step)."""
    state = prefill(model, _ids(model, rows, context, gen), capacity=context + steps * repeat, pad_id=0,
                    share_prefix=False)
    pool = Pool(cache=state.cache, mask=state.mask, last_pos=state.last_pos, rows=torch.arange(rows),
                chosen=torch.randint(0, model.config.vocab_size, (rows,), generator=gen),
                live=torch.ones(rows, dtype=torch.bool), flush=torch.zeros(rows, dtype=torch.bool),
                width=torch.zeros(rows, dtype=torch.long))
    medians = []
    for _ in range(repeat):
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            pool.step(model, False)
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return min(medians)


def pass_seconds(model: Any, rows: int, width: int, cached: int, gen: torch.Generator) -> float:
    """The seconds of one pass reading `width` new tokens in each of `rows` rows, after `cached` positions each
    (0: a prompt read; more: tokens read after an answer's cache, as the statements and follow-up questions are)."""
    if not cached:
        ids = _ids(model, rows, width, gen)
        start = time.perf_counter()
        prefill(model, ids, capacity=width, pad_id=0, share_prefix=False)
        return time.perf_counter() - start
    state = prefill(model, _ids(model, rows, cached, gen), capacity=cached + width, pad_id=0, share_prefix=False)
    ids = _ids(model, rows, width, gen)
    start = time.perf_counter()
    extend(model, state, ids, pad_id=0)
    return time.perf_counter() - start


def _shape(text: str) -> tuple[int, int]:
    rows, width = text.lower().split("x")
    return int(rows), int(width)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", default="8,16,32,64,96", help="Decoding steps of these many rows.")
    parser.add_argument("--context", type=int, default=200, help="Cached positions per row before a step (a "
                        "HaluEval-QA prompt, 156 tokens on average, and its answer).")
    parser.add_argument("--steps", type=int, default=8, help="Steps timed per row count (their median is kept).")
    parser.add_argument("--prompt", default="8x160", help="ROWSxWIDTH of a prompt read (the loop reads prompts in "
                        "groups of 8).")
    parser.add_argument("--after", default="16x77", help="ROWSxWIDTH of tokens read after `--context` cached "
                        "positions (16 answers' statements and two follow-up questions, 77 tokens each).")
    parser.add_argument("--repeat", type=int, default=3, help="Time each shape this many times; keep the fastest.")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--store", metavar="NAME", help="write the result to benchmarks/results/NAME.json")
    parser.add_argument("--check", metavar="NAME", help="exit 1 when a figure drifted from "
                        "benchmarks/results/NAME.json")
    args = parser.parse_args()
    threads = configure_threads(args.threads)
    load_before = [round(x, 2) for x in os.getloadavg()]
    model = HFBackend(args.model).model
    gen = torch.Generator().manual_seed(0)
    report: dict[str, Any] = {"model": args.model, "dtype": str(model.dtype).removeprefix("torch."),
                              "threads": threads, "available_cores": available_cores(), "context": args.context,
                              "loadavg_before": load_before, "steps": [], "passes": []}
    with torch.inference_mode():
        step_seconds(model, 2, 8, 2, 1, gen)  # warm-up: kernels ready
        for rows in (int(r) for r in args.rows.split(",")):
            wall = step_seconds(model, rows, args.context, args.steps, args.repeat, gen)
            report["steps"].append({"rows": rows, "wall_s": round(wall, 4),
                                    "ms_per_position": round(1e3 * wall / rows, 3)})
            print(f"step of {rows} rows: {1e3 * wall:.1f} ms", file=sys.stderr, flush=True)
        for kind, shape, cached in (("prompt", args.prompt, 0), ("after_cache", args.after, args.context)):
            rows, width = _shape(shape)
            wall = min(pass_seconds(model, rows, width, cached, gen) for _ in range(args.repeat))
            report["passes"].append({"kind": kind, "rows": rows, "width": width, "cached": cached,
                                     "wall_s": round(wall, 4),
                                     "ms_per_position": round(1e3 * wall / (rows * width), 3)})
            print(f"{kind} pass of {rows}x{width}: {1e3 * wall:.1f} ms", file=sys.stderr, flush=True)
    fullest = report["steps"][-1]["ms_per_position"]
    report["step_over_prompt_position"] = round(fullest / report["passes"][0]["ms_per_position"], 2)
    report["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    finish("forward_costs", report, args.store, args.check)


if __name__ == "__main__":
    main()
