"""Greedy decoding throughput on the same prompts, one process, one model load: one-at-a-time, today's batched
path (transformers `generate`, `decoder="transformers"`) and the new path (haldet's own loop, the default), and
optionally faster numerics (`--numerics bf16,int8`, which change answers).

The modes run interleaved in rounds (old, new, old, new, ...) so that load from other processes hits them alike;
per mode it reports wall seconds and CPU seconds of this process (with one thread, CPU time is what the work costs
on a quiet core, even when the machine is shared), items/s and generated tokens/s, and how many greedy answers are
identical (token ids) to today's batched path. `os.getloadavg()` is recorded before and after.
The new path reads prompts in groups of `--new-batch` and decodes them in one continuously refilled pool of
`--decode-rows` rows. Defaults: the protocol's (generation.batch_size 8, 64 new tokens for short answers).
Usage: python benchmarks/generation.py [--n 64] [--old-batch 8] [--new-batch 8] [--max-new-tokens 64]
       [--rounds 1] [--one-at-a-time 8] [--numerics bf16,int8] [--sample-prompts 8] [--threads 1]
       [--decode-rows 96] [--store NAME] [--check NAME]
`--store NAME` writes benchmarks/results/NAME.json, from which benchmarks/render_docs.py renders docs/speed.md's
decoding table; `--check NAME` exits 1 when a figure drifted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import finish  # benchmarks/results.py: stored figures, --store and --check

from haldet.backends.hf.backend import HFBackend
from haldet.datasets.base import DATASETS
from haldet.text.prompts import build_messages
from haldet.util.threads import available_cores, configure_threads


def _timed(backend: HFBackend, prompts: list[str], batch: int, max_new_tokens: int) -> tuple[float, float, list]:
    wall, cpu = time.perf_counter(), time.process_time()
    outs = backend.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch)
    return time.perf_counter() - wall, time.process_time() - cpu, outs


def _sampling(old: HFBackend, new: HFBackend, prompts: list[str], max_new_tokens: int) -> dict[str, Any]:
    """K=5 samples per prompt (the protocol's defaults), today's path then the new one, same per-row seeds."""
    out: dict[str, Any] = {"k": 5, "prompts": len(prompts), "max_new_tokens": max_new_tokens, "batch_size": 40}
    samples = {}
    for name, backend in (("today", old), ("new", new)):
        wall, cpu = time.perf_counter(), time.process_time()
        samples[name] = backend.sample(prompts, k=5, temperature=1.0, top_p=0.9, seeds=list(range(len(prompts))),
                                       max_new_tokens=max_new_tokens, batch_size=40)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        tokens = sum(len(o.token_ids) for outs in samples[name] for o in outs)
        out[name] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "tokens": tokens,
                     "tokens_per_s_cpu": round(tokens / cpu, 2)}
        print(f"sampling {name}: {wall:.1f} s wall, {cpu:.1f} s cpu", file=sys.stderr, flush=True)
    pairs = [(a.token_ids, b.token_ids) for x, y in zip(samples["today"], samples["new"], strict=True)
             for a, b in zip(x, y, strict=True)]
    out["identical_samples"] = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"
    out["speedup_cpu_per_token"] = round(out["new"]["tokens_per_s_cpu"] / out["today"]["tokens_per_s_cpu"], 2)
    out["speedup_cpu_per_item"] = round(out["today"]["cpu_s"] / out["new"]["cpu_s"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--old-batch", type=int, default=8, help="Batch of today's path (generation.batch_size).")
    parser.add_argument("--new-batch", type=int, default=8, help="Prompts read together by the new path.")
    parser.add_argument("--decode-rows", type=int, default=96, help="Rows the new path decodes together.")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--one-at-a-time", type=int, default=8, help="Prompts run one at a time (0 = skip).")
    parser.add_argument("--numerics", default="", help="Also time these fast_numerics (comma list: bf16,int8).")
    parser.add_argument("--sample-prompts", type=int, default=0,
                        help="Also time K=5 sampling (top-p 0.9, batch 40 sequences) of this many prompts, today's "
                             "path vs the new one, same seeds (0 = skip).")
    parser.add_argument("--sample-max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--store", metavar="NAME", help="write the result to benchmarks/results/NAME.json")
    parser.add_argument("--check", metavar="NAME", help="exit 1 when a figure drifted from "
                        "benchmarks/results/NAME.json")
    args = parser.parse_args()
    threads = configure_threads(args.threads)
    load_before = os.getloadavg()

    new = HFBackend(args.model, decode_rows=args.decode_rows)
    old = HFBackend(args.model, decoder="transformers")
    old._model, old.stop_ids = new.model, new.stop_ids  # one copy of the weights
    instances, _ = DATASETS.get("halueval_qa")().load(limit=args.n, seed=42)
    prompts = [new.render_chat(build_messages(i, "You are a helpful, accurate, and honest AI assistant."))
               for i in instances]
    new.generate(prompts[:2], max_new_tokens=4, batch_size=2)  # warm-up: weights loaded, kernels ready
    modes: dict[str, tuple[HFBackend, int, list[str]]] = {
        "batched_today": (old, args.old_batch, prompts), "new": (new, args.new_batch, prompts)}
    if args.one_at_a_time:
        modes["one_at_a_time_today"] = (old, 1, prompts[: args.one_at_a_time])
    for numerics in filter(None, args.numerics.split(",")):
        fast = HFBackend(args.model, fast_numerics=numerics, decode_rows=args.decode_rows)
        fast.generate(prompts[:2], max_new_tokens=4, batch_size=2)
        modes[f"new_{numerics}"] = (fast, args.new_batch, prompts)

    totals: dict[str, dict[str, float]] = {m: {"wall_s": 0.0, "cpu_s": 0.0, "tokens": 0, "items": 0} for m in modes}
    outputs: dict[str, list[Any]] = {}
    for round_ in range(args.rounds):
        for mode, (backend, batch, subset) in modes.items():
            wall, cpu, outs = _timed(backend, subset, batch, args.max_new_tokens)
            t = totals[mode]
            t["wall_s"] += wall
            t["cpu_s"] += cpu
            t["tokens"] += sum(len(o.token_ids) for o in outs)
            t["items"] += len(subset)
            outputs[mode] = outs
            print(f"round {round_ + 1} {mode}: {wall:.1f} s wall, {cpu:.1f} s cpu", file=sys.stderr, flush=True)
    reference = [o.token_ids for o in outputs["batched_today"]]
    report: dict[str, Any] = {
        "model": args.model, "dataset": "halueval_qa", "n_prompts": args.n, "max_new_tokens": args.max_new_tokens,
        "decode_rows": args.decode_rows,
        "rounds": args.rounds, "torch_threads": torch.get_num_threads(), "threads_set": threads,
        "available_cores": available_cores(), "host_cpu_count": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()], "modes": {},
    }
    for mode, t in totals.items():
        backend, batch, subset = modes[mode]
        same = sum(o.token_ids == r for o, r in zip(outputs[mode], reference, strict=False))
        report["modes"][mode] = {
            "decoder": backend.decoder, "fast_numerics": backend.fast_numerics, "batch_size": batch,
            "items": len(subset), "wall_s": round(t["wall_s"], 2), "cpu_s": round(t["cpu_s"], 2),
            "items_per_s_wall": round(t["items"] / t["wall_s"], 3),
            "items_per_s_cpu": round(t["items"] / t["cpu_s"], 3),
            "tokens_per_s_wall": round(t["tokens"] / t["wall_s"], 2),
            "tokens_per_s_cpu": round(t["tokens"] / t["cpu_s"], 2),
            "identical_greedy_answers_vs_batched_today": f"{same}/{len(subset)}",
        }
    if args.sample_prompts:
        report["sampling"] = _sampling(old, new, prompts[: args.sample_prompts], args.sample_max_new_tokens)
    base = report["modes"]["batched_today"]
    for m in report["modes"].values():
        m["speedup_wall_vs_batched_today"] = round(m["items_per_s_wall"] / base["items_per_s_wall"], 2)
        m["speedup_cpu_vs_batched_today"] = round(m["items_per_s_cpu"] / base["items_per_s_cpu"], 2)
    print(json.dumps(report, indent=2))
    finish("generation", report, args.store, args.check)


if __name__ == "__main__":
    main()
