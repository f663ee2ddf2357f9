"""HalluEntity suite cost: wall time per 1,000 response tokens and bytes stored per token.

Runs `haldet run --suite halluentity` in-process on a copy of a HalluEntity-schema file (default: the test
fixture, its rows repeated under new ids up to --items), in a fresh temporary run directory, twice:
  1. token pass only with what likelihood + entropy read (log-probs, entropies, offsets: no attention);
  2. all five detectors (adds top-k and the answer-to-answer attention, i.e. eager attention in the pass).
Reports, per configuration, the generate stage's wall time (the one teacher-forced pass) per 1,000 response
tokens, each detector's scoring time per 1,000 tokens, and the bytes of generate.jsonl + generate/*.h5 per token.
The detectors read the evidence of that one pass: no detector runs the model. Prints JSON.
Usage: python benchmarks/halluentity.py [--items 30] [--data FILE.jsonl] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

import haldet as pipeline
from haldet.config_files import compose_config
from haldet.suites.base import get_suite

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "datasets" / "halluentity" / "train.jsonl"


def _stage_bytes(cell: Path) -> int:
    total = (cell / "generate.jsonl").stat().st_size
    if (cell / "generate").is_dir():
        total += sum(p.stat().st_size for p in (cell / "generate").glob("*.h5"))
    return total


def _run(data_dir: Path, out: Path, detectors: list[str]) -> dict[str, object]:
    config = compose_config(None, base=get_suite("halluentity").config_base(), data_dir=str(data_dir),
                         detectors=detectors, evaluation__bootstrap=0)
    _, cells = pipeline.run(config, out)
    cell = cells[0]
    if cell.error:
        raise SystemExit(f"benchmark run failed: {cell.error}")
    cell_dir = out / "halluentity" / "smollm2-135m"
    recs = [json.loads(x) for x in (cell_dir / "generate.jsonl").read_text().splitlines()]
    tokens = sum(r["n_tokens"] for r in recs)
    per_k = 1000.0 / max(1, tokens)
    return {
        "detectors": detectors, "items": len(recs), "response_tokens": tokens,
        "token_pass_parts": recs[0]["tokens"]["parts"],
        "generate_s_per_1k_tokens": round(cell.timings.get("generate", 0.0) * per_k, 3),
        "score_s_per_1k_tokens": {d.name: round((d.fit_seconds + d.score_seconds) * per_k, 3) for d in cell.detectors},
        "bytes_per_token": round(_stage_bytes(cell_dir) / max(1, tokens), 1),
        "detector_errors": {d.name: d.error for d in cell.detectors if d.error},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=30)
    parser.add_argument("--data", type=Path, default=FIXTURE)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [json.loads(x) for x in args.data.read_text().splitlines() if x.strip()]
    with tempfile.TemporaryDirectory(prefix="haldet-bench-he-") as tmp:
        data_dir = Path(tmp) / "data"
        (data_dir / "halluentity").mkdir(parents=True)
        with open(data_dir / "halluentity" / "train.jsonl", "w") as fh:
            for i in range(args.items):
                fh.write(json.dumps({**rows[i % len(rows)], "id": f"bench-{i}"}) + "\n")
        results = [_run(data_dir, Path(tmp) / "run-light", ["likelihood", "entropy"]),
                   _run(data_dir, Path(tmp) / "run-all", list(get_suite("halluentity").detectors))]
    print(json.dumps({"benchmark": "halluentity", "model": "smollm2-135m", "torch_threads": args.threads,
                      "cpu_count": os.cpu_count(), "python": sys.version.split()[0], "runs": results}, indent=2))


if __name__ == "__main__":
    main()
