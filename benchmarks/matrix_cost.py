"""The OpenHalDet matrix (17 datasets x 4 backbones, K=5) costed in GPU-hours and stored bytes (docs/scale.md).

Not a measurement: the token volume per item follows from the stage structure (prefill 4P + 2A + 120 tokens: the
answer's prompt, the statement/features pass over prompt + answer, the two auxiliary questions reading the shared
head once, the K samples' shared prompt; decoded rows (K+1) x A + 10), and the seconds per token from two
constants: prefill at `--mfu` of the GPU's bf16 peak (2 x params FLOPs per token) and decoding memory-bound over
the weights once per step at `--bw-use` of its bandwidth, `--rows` rows per step, times `--step-overhead` (KV
cache reads, the loop's per-step work). Replace them with measured figures (benchmarks/gpu.py) when a GPU has
run. Stored bytes: seven float16 [layers + 1, width] feature arrays, K x width sample states, and the JSONL logs
scaled from the embedded model's measured bytes by the answer length. P and A per dataset are estimates (the
HaluEval-QA ones measured). Prints a Markdown table, or JSON with --json. Usage:
  python benchmarks/matrix_cost.py [--cap 2000] [--mfu 0.4] [--bw-use 0.7] [--rows 96] [--step-overhead 2] [--json]
"""

from __future__ import annotations

import argparse
import json

from haldet.papers.plan import SPLITS, Assumptions, gpu_seconds, model_size

NAMES = ("Llama-3.2-3B-Instruct", "Llama-3.1-8B-Instruct", "Qwen3-8B", "Qwen3-14B")
BACKBONES = {name: model_size(name) for name in NAMES}  # params, layers, width (haldet.papers.plan)
OPENHALDET = ("arc_challenge", "commonsenseqa", "triviaqa", "truthfulqa", "squad_v2", "hotpotqa", "coqa",
              "halueval_qa", "ragtruth", "xsum", "gsm8k", "svamp", "theoremqa", "humaneval", "mbpp", "xlam", "belebele")
# evaluation split size, prompt tokens, answer tokens (the plan's estimates; SVAMP: the 300-item test split read
# by default, where the preset reads the paper's 700-item train split)
DATASETS = {name: (300, *SPLITS[name][1:]) if name == "svamp" else SPLITS[name] for name in OPENHALDET}
K = 5
GENERATE_JSONL, AUX_JSONL, SCORE_JSONL, SAMPLE_TEXT = 1800, 400, 110, 5700  # bytes, embedded model, A = 30


def item_seconds(params: float, p: int, a: int, args: argparse.Namespace) -> float:
    """One item's answer, K samples and the follow-up and feature passes."""
    return gpu_seconds(params, 4 * p + 2 * a + 120, (K + 1) * a + 10,
                       Assumptions(mfu=args.mfu, bw_use=args.bw_use, rows=args.rows, step_overhead=args.step_overhead))


def stored_bytes(layers: int, width: int, a: int) -> float:
    return (14 * (layers + 1) * width + 2 * K * width + SAMPLE_TEXT * a / 30
            + GENERATE_JSONL * (1 + a / 30) + AUX_JSONL + 17 * SCORE_JSONL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cap", type=int, default=2000)
    parser.add_argument("--mfu", type=float, default=0.4)
    parser.add_argument("--bw-use", type=float, default=0.7)
    parser.add_argument("--rows", type=int, default=96)
    parser.add_argument("--step-overhead", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for name, (n, p, a) in DATASETS.items():
        per = {b: item_seconds(params, p, a, args) for b, (params, _, _) in BACKBONES.items()}
        size = sum(stored_bytes(layers, width, a) for _, layers, width in BACKBONES.values())
        rows.append({"dataset": name, "split_items": n, "items": min(n, args.cap), "prompt_tokens": p,
                     "answer_tokens": a, "gpu_s_per_item": per,
                     "gpu_hours": sum(per.values()) * min(n, args.cap) / 3600,
                     "gpu_hours_full_split": sum(per.values()) * n / 3600,
                     "stored_gb": size * min(n, args.cap) / 1e9, "stored_gb_full_split": size * n / 1e9})
    totals = {k: sum(r[k] for r in rows) for k in ("split_items", "items", "gpu_hours", "gpu_hours_full_split",
                                                   "stored_gb", "stored_gb_full_split")}
    if args.json:
        print(json.dumps({"assumptions": vars(args), "rows": rows, "totals": totals}, indent=2))
        return
    print(f"| dataset | eval split | items (cap {args.cap:,}) | prompt tok | answer tok | GPU-s/item 3B | 8B | "
          f"Qwen3-8B | 14B | GPU-h, 4 backbones | GPU-h, full split | stored GB, 4 backbones |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = " | ".join(f"{v:.3f}" for v in r["gpu_s_per_item"].values())
        print(f"| {r['dataset']} | {r['split_items']:,} | {r['items']:,} | {r['prompt_tokens']} | "
              f"{r['answer_tokens']} | {s} | {r['gpu_hours']:.2f} | {r['gpu_hours_full_split']:.2f} | "
              f"{r['stored_gb']:.1f} |")
    print(f"| **total** | {totals['split_items']:,} | {totals['items']:,} | | | | | | | "
          f"**{totals['gpu_hours']:.1f}** | **{totals['gpu_hours_full_split']:.1f}** | **{totals['stored_gb']:.0f}** "
          f"(full split: {totals['stored_gb_full_split']:.0f}) |")


if __name__ == "__main__":
    main()
