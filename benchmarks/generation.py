"""One-prompt-at-a-time vs batched greedy generation on the embedded model, same 64 prompts, one process.

Prints JSON: items/s of each mode and their ratio. Usage: python benchmarks/generation.py [--n 64] [--batch 16]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from haldet.backends.hf import HFBackend
from haldet.datasets.base import DATASETS
from haldet.prompts import build_messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()

    backend = HFBackend(args.model)
    instances, _ = DATASETS.get("halueval_qa")().load(limit=args.n, seed=42)
    prompts = [backend.render_chat(build_messages(i, "You are a helpful, accurate, and honest AI assistant."))
               for i in instances]
    backend.generate(prompts[:2], max_new_tokens=4, batch_size=2)  # warm-up: weights loaded, kernels ready

    timings = {}
    outputs = {}
    for mode, batch in (("one_at_a_time", 1), ("batched", args.batch)):
        start = time.perf_counter()
        outputs[mode] = backend.generate(prompts, max_new_tokens=args.max_new_tokens, batch_size=batch)
        timings[mode] = time.perf_counter() - start
    same = sum(a.text == b.text for a, b in zip(outputs["one_at_a_time"], outputs["batched"], strict=True))
    print(json.dumps({
        "model": args.model, "n_prompts": args.n, "max_new_tokens": args.max_new_tokens, "batch_size": args.batch,
        "cpu_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "one_at_a_time_items_per_s": round(args.n / timings["one_at_a_time"], 3),
        "batched_items_per_s": round(args.n / timings["batched"], 3),
        "speedup": round(timings["one_at_a_time"] / timings["batched"], 2),
        "identical_answers": same,
    }, indent=2))


if __name__ == "__main__":
    main()
