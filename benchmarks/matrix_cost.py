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

BACKBONES = {"Llama-3.2-3B-Instruct": (3.21e9, 28, 3072), "Llama-3.1-8B-Instruct": (8.03e9, 32, 4096),
             "Qwen3-8B": (8.19e9, 36, 4096), "Qwen3-14B": (14.8e9, 40, 5120)}  # params, layers, width
DATASETS = {  # evaluation split size, prompt tokens, answer tokens
    "arc_challenge": (1172, 150, 8), "commonsenseqa": (1221, 120, 8), "triviaqa": (17944, 60, 16),
    "truthfulqa": (817, 60, 40), "squad_v2": (11873, 220, 16), "hotpotqa": (7405, 300, 20),
    "coqa": (7983, 450, 16), "halueval_qa": (10000, 160, 30), "ragtruth": (2700, 750, 200),
    "xsum": (11334, 550, 40), "gsm8k": (1319, 150, 220), "svamp": (300, 110, 150), "theoremqa": (800, 150, 350),
    "humaneval": (164, 180, 220), "mbpp": (500, 140, 160), "xlam": (60000, 800, 60), "belebele": (900, 300, 8)}
K = 5
PEAK_FLOPS, BANDWIDTH = 989e12, 3.35e12  # H100 SXM bf16 dense, HBM3
GENERATE_JSONL, AUX_JSONL, SCORE_JSONL, SAMPLE_TEXT = 1800, 400, 110, 5700  # bytes, embedded model, A = 30


def gpu_seconds(params: float, p: int, a: int, args: argparse.Namespace) -> float:
    prefill, decoded = 4 * p + 2 * a + 120, (K + 1) * a + 10
    per_prefill = 2 * params / (PEAK_FLOPS * args.mfu)
    per_decoded = args.step_overhead * 2 * params / (BANDWIDTH * args.bw_use) / args.rows
    return prefill * per_prefill + decoded * per_decoded


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
        per = {b: gpu_seconds(params, p, a, args) for b, (params, _, _) in BACKBONES.items()}
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
