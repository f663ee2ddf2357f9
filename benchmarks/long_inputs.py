"""Given responses of 1K, 4K and 8K tokens read by the embedded model: the two passes (`before`: the token pass,
then the features pass asking for every layer's states of a whole batch) against the one pooled pass (`after`:
`HFBackend.read_given`, batched by `tokens.token_budget`). SAPLMA's evidence: token log-probs, and every layer's
states pooled by mean and last over the answer.

Each (mode, length) runs in its own process, so its peak resident memory (`ru_maxrss`) is its own: reported whole,
above the loaded model, and per 1,000 tokens read; seconds are wall and CPU (robust to other processes on a shared
machine) of the passes alone, also per 1,000 tokens. `--check` also compares the two modes' outputs (log-probs and
pooled states, largest absolute difference). Prints JSON. Usage:
  python benchmarks/long_inputs.py [--lengths 1024,4096,8192] [--items 2] [--modes before,after] [--check]
                                   [--store NAME] [--check-stored NAME]
`--store NAME` writes benchmarks/results/NAME.json, from which benchmarks/render_docs.py renders docs/speed.md's
long-input table; `--check-stored NAME` exits 1 when a figure drifted from it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import finish  # benchmarks/results.py: stored figures, --store and --check

PROMPT = "Read the article below and say whether every statement in it is supported.\n"
PARAGRAPH = ("The river town grew around a stone bridge built by merchants who traded wool, salt and timber. "
             "Its market charter dates from the thirteenth century, and the guild hall still stands beside the "
             "square, where a clock tower was added after a fire destroyed the older wooden belfry. ")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def child(mode: str, length: int, items: int, budget: int, dump: str | None) -> dict[str, Any]:
    from haldet.backends.base import EvidenceRequest, ForwardRequest, TokenRequest
    from haldet.backends.hf.backend import HFBackend
    from haldet.config import FeatureConfig, TokensConfig

    backend = HFBackend("smollm2-135m", device="cpu")
    prompt = backend.encode_prompt(PROMPT)
    # load the weights and touch every page of them (they are memory-mapped) before measuring
    backend.token_pass([TokenRequest(prompt, prompt[:4], "warm-up")], top_k=0, entropies=False, attention=False,
                       batch_size=1)
    text_ids = backend.encode_text(PARAGRAPH * (length // 40 + 2))
    answers = [text_ids[i : i + length - len(prompt)] for i in range(items)]  # distinct windows of the same text
    requests = [TokenRequest(prompt, a, f"item{i}") for i, a in enumerate(answers)]
    loaded = _rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    if mode == "before":
        toks = backend.token_pass(requests, top_k=0, entropies=False, attention=False,
                                  batch_size=TokensConfig().batch_size)
        fwd = backend.forward([ForwardRequest(ids=r.prompt_ids + r.answer_ids, start=len(r.prompt_ids), key=r.key)
                               for r in requests], layers=None, poolings=["mean", "last"], logprobs=True, icr=False,
                              batch_size=FeatureConfig().batch_size)
    else:
        evidence = EvidenceRequest(layers=list(range(backend.layer_count() + 1)), poolings=["mean", "last"])
        toks, found = backend.read_given(requests, evidence, top_k=0, entropies=False, attention=False, layers=False,
                                         batch_size=TokensConfig().batch_size, token_budget=budget)
        fwd = found or []
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = _rss_mb()
    if dump:
        np.savez(dump, **{f"lp_{o.key}": o.token_logprobs for o in toks},
                 **{f"{name}_{o.key}": arr for o in fwd for name, arr in o.pooled.items()})
    tokens = items * length
    return {"mode": mode, "length": length, "items": items, "tokens": tokens, "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "wall_s_per_1k_tokens": round(wall / tokens * 1000, 3),
            "cpu_s_per_1k_tokens": round(cpu / tokens * 1000, 3), "peak_rss_mb": round(peak),
            "rss_after_load_mb": round(loaded), "peak_above_load_mb": round(peak - loaded),
            "peak_above_load_mb_per_1k_tokens": round((peak - loaded) / tokens * 1000, 1),
            "threads": int(__import__("torch").get_num_threads())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,4096,8192")
    parser.add_argument("--items", type=int, default=2, help="given responses per length")
    parser.add_argument("--modes", default="before,after")
    parser.add_argument("--token-budget", type=int, default=4096)
    parser.add_argument("--check", action="store_true", help="compare the modes' outputs")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "LENGTH"), help=argparse.SUPPRESS)
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    parser.add_argument("--store", metavar="NAME", help="write the result to benchmarks/results/NAME.json")
    parser.add_argument("--check-stored", metavar="NAME", help="exit 1 when a figure drifted from "
                        "benchmarks/results/NAME.json")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.items, args.token_budget, args.dump)))
        return
    results, gaps = [], {}
    for length in [int(x) for x in args.lengths.split(",")]:
        dumps = {}
        for mode in args.modes.split(","):
            dump = f"/tmp/long_inputs_{os.getpid()}_{mode}_{length}.npz" if args.check else None
            cmd = [sys.executable, __file__, "--child", mode, str(length), "--items", str(args.items),
                   "--token-budget", str(args.token_budget)] + (["--dump", dump] if dump else [])
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise SystemExit(f"{mode} at {length} tokens failed:\n{out.stderr[-2000:]}")
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # each as it ends: a long run may be cut
            if dump:
                dumps[mode] = dump
        if len(dumps) == 2:
            a, b = (np.load(p) for p in dumps.values())
            gaps[length] = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a.files)
            print(json.dumps({"length": length, "max_abs_gap_between_modes": gaps[length]}), file=sys.stderr,
                  flush=True)
            for p in dumps.values():
                os.remove(p)
    report = {"model": "smollm2-135m (embedded GGUF, fp32 on CPU)", "loadavg": os.getloadavg(),
              "token_budget": args.token_budget, "results": results, "max_abs_gap_between_modes": gaps or None}
    print(json.dumps(report, indent=1))
    finish("long_inputs", report, args.store, args.check_stored)


if __name__ == "__main__":
    main()
