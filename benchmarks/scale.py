"""The cost curve: what a run costs per item as the items grow, and what `haldet report` costs on a very large run.

Three parts (all JSON on stdout; `--parts` picks them):

`model`: the whole `haldet run` on the embedded model (smollm2-135m, CPU) over halueval_qa at `--model-sizes`
  items (default 50,200) with `--model-detectors` (default perplexity and ln_entropy: the greedy answer and K=5
  samples; `perplexity` alone is the greedy answer only); per size the wall and CPU
  seconds of each stage and of scoring, per item, and the tokens the model read and wrote (seconds per 1,000
  tokens: the per-token figure docs/scale.md costs the paper's matrix with).
`flow`: the same flow at `--flow-sizes` items (default 50,200,1000,5000) with an OpenAI-compatible mock endpoint
  as the model (tests/mock_openai.py: a real local HTTP server answering at once), so every stage that can grow
  with the items (store appends and reads, the rule judge, the split, sampling, auxiliary queries, scoring and
  metrics with their bootstrap, the results and the report) is measured at sizes the CPU model cannot reach here;
  detectors perplexity, lexical_similarity, verbalized, K=2 samples.
`report`: a synthetic run (haldet.testing.synthetic_run: N items x 17 detectors with stored scores and every stage
  log) at `--report-sizes` (default 1000,10000,100000): `haldet report` in a child process (wall and CPU seconds,
  peak resident memory), reading every detector's test scores from the store, and the bootstrap CIs of every
  detector (`evaluate`, 1,000 resamples).

Growth: for each measured cost c(n), `exponent` is the slope of log c over log n between the two largest sizes
(1.0 = linear; the project's bound is 1.05), and `exponent_fit` the least-squares slope over every size. Fixed
costs (model load, imports) make small sizes look dear, so the slope between the largest sizes is the one that
shows growth. Usage:
  python benchmarks/scale.py [--parts model,flow,report] [--model-sizes 50,200]
                             [--model-detectors perplexity,ln_entropy] [--flow-sizes 50,200,1000,5000]
                             [--report-sizes 1000,10000,100000] [--detectors 17] [--compare-old 3]
                             [--store NAME] [--check NAME]

`report` also times the resampled metrics of `--compare-old` detectors by the former per-metric code
(tests/bootstrap_reference.py) and by the one pass, alternating in one process (a ratio valid under load), and
checks that their values are equal. `haldet report`'s peak memory is that child's own (benchmarks/peak.py).
`--store NAME` writes benchmarks/results/NAME.json (with the machine, load average, commit and date), from which
benchmarks/render_docs.py regenerates the tables of docs/scale.md; `--check NAME` exits 1, naming each figure,
when one drifted from the stored one by more than its noise (benchmarks/results.py says how much that is).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import finish  # benchmarks/results.py: stored figures, --store and --check

ROOT = Path(__file__).resolve().parents[1]
FLOW_STAGES = ("load_data", "generate", "annotate", "split", "sample", "auxiliary", "features")


def exponents(sizes: list[int], costs: list[float]) -> dict[str, float | None]:
    """Growth of a cost with the items: slope between the two largest sizes, and the least-squares slope."""
    pairs = [(n, c) for n, c in zip(sizes, costs, strict=True) if c and c > 0]
    if len(pairs) < 2:
        return {"exponent": None, "exponent_fit": None}
    (n1, c1), (n2, c2) = pairs[-2], pairs[-1]
    x, y = np.log([n for n, _ in pairs]), np.log([c for _, c in pairs])
    return {"exponent": round(math.log(c2 / c1) / math.log(n2 / n1), 3),
            "exponent_fit": round(float(np.polyfit(x, y, 1)[0]), 3)}


def growth(sizes: list[int], runs: list[dict[str, Any]], field: str) -> dict[str, dict[str, float | None]]:
    """Exponents of every cost in `runs[i][field]` (a name -> seconds mapping) over `sizes`."""
    names = sorted({k for r in runs for k in r[field]})
    return {k: exponents(sizes, [r[field].get(k, 0.0) for r in runs]) for k in names}


def run_flow(config: Any, out: Path) -> dict[str, Any]:
    """One `haldet.run` in a fresh directory: per-stage wall seconds (the manifest's), scoring, whole run, CPU."""
    import haldet as pipeline

    start, start_cpu = time.perf_counter(), time.process_time()
    rows, cells = pipeline.run(config, out)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    cell = cells[0]
    if cell.error:
        raise SystemExit(f"run failed: {cell.error}")
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["cells"][0]
    stages = {k: float(v) for k, v in (entry.get("stage_seconds") or {}).items()}
    stages["scoring"] = sum(float(d.get("fit_s") or 0) + float(d.get("score_s") or 0) for d in entry["detectors"])
    start = time.perf_counter()
    from haldet.report.build import report_runs

    report_runs([out], out)
    stages["report"] = time.perf_counter() - start
    tokens = {"prompt": 0, "answer": 0}
    for path in out.glob("*/*/generate.jsonl"):
        for line in path.open():
            rec = json.loads(line)
            tokens["prompt"] += int(rec.get("prompt_tokens") or rec.get("api_prompt_tokens") or 0)
            tokens["answer"] += int(rec.get("n_tokens") or 0)
    return {"wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "stage_s": {k: round(v, 4) for k, v in stages.items()},
            "rows": len(rows), "tokens": tokens,
            "store_bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}


def per_item(result: dict[str, Any], n: int) -> dict[str, Any]:
    return {"wall_s_per_item": round(result["wall_s"] / n, 5), "cpu_s_per_item": round(result["cpu_s"] / n, 5),
            "store_bytes_per_item": round(result["store_bytes"] / n)}


def part_model(sizes: list[int], detectors: list[str], tmp: Path) -> dict[str, Any]:
    from haldet.config import RunConfig

    runs = []
    for n in sizes:
        cfg = RunConfig(datasets=["halueval_qa"], models=["smollm2-135m"], limit=n, detectors=list(detectors))
        print(f"scale: model run, {n} items", file=sys.stderr, flush=True)
        res = run_flow(cfg, tmp / f"model{n}")
        gen = res["stage_s"].get("generate", 0.0)
        tok = res["tokens"]["prompt"] + res["tokens"]["answer"]
        res.update(per_item(res, n), generate_s_per_1k_tokens=round(1000 * gen / tok, 4) if tok else None,
                   generate_s_per_1k_answer_tokens=round(1000 * gen / res["tokens"]["answer"], 4)
                   if res["tokens"]["answer"] else None)
        runs.append(res)
    return {"sizes": sizes, "model": "smollm2-135m (embedded, CPU fp32)", "detectors": detectors,
            "runs": runs, "growth_whole_run": exponents(sizes, [r["wall_s"] for r in runs]),
            "growth_cpu": exponents(sizes, [r["cpu_s"] for r in runs]),
            "growth_stages": growth(sizes, runs, "stage_s")}


def part_flow(sizes: list[int], tmp: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests"))
    from haldet.config import EndpointConfig, RunConfig, SampleConfig
    from mock_openai import FakeOpenAI

    def content(arg: str, body: dict[str, Any], j: int) -> str:
        text = " ".join(m["content"] for m in body["messages"])
        if "one number between 0 and 1" in body["messages"][-1]["content"]:
            return "0.2" if len(text) % 2 else "0.8"
        return f"answer {len(text) % 7} variant {j % 3}"

    runs = []
    with FakeOpenAI(content=content, default="ok:") as srv:
        for n in sizes:
            cfg = RunConfig(datasets=["halueval_qa"], models=["openai:mock"], limit=n,
                            detectors=["perplexity", "lexical_similarity", "verbalized"],
                            sample=SampleConfig(k=2),
                            endpoint=EndpointConfig(base_url=srv.base_url, backoff=0.01, n_samples="n"))
            print(f"scale: flow run (mock endpoint), {n} items", file=sys.stderr, flush=True)
            res = run_flow(cfg, tmp / f"flow{n}")
            res.update(per_item(res, n))
            runs.append(res)
    return {"sizes": sizes, "model": "openai:mock (tests/mock_openai.py, local HTTP)",
            "detectors": ["perplexity", "lexical_similarity", "verbalized"], "runs": runs,
            "growth_whole_run": exponents(sizes, [r["wall_s"] for r in runs]),
            "growth_cpu": exponents(sizes, [r["cpu_s"] for r in runs]),
            "growth_stages": growth(sizes, runs, "stage_s")}


def timed_child(args: list[str]) -> dict[str, float]:
    """Wall and CPU seconds and peak resident memory of this child alone, through benchmarks/peak.py (a small
    launcher that reaps it with `os.wait4`): RUSAGE_CHILDREN would give the largest of every child so far, and a
    child started from this (large) process directly would count this process's size until its exec."""
    with tempfile.TemporaryDirectory() as tmp:
        usage_file = Path(tmp) / "usage.json"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, str(Path(__file__).with_name("peak.py")), str(usage_file), "--",
                               *args], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        wall = time.perf_counter() - start
        if proc.returncode:
            raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-2000:]}")
        usage = json.loads(usage_file.read_text())
    return {"wall_s": round(wall, 3), "cpu_s": usage["cpu_s"], "peak_rss_mb": usage["peak_rss_mb"]}


def old_vs_new(labels: np.ndarray, scores: dict[str, np.ndarray], n_compare: int) -> dict[str, Any]:
    """CPU seconds of the resampled metrics (1,000 resamples, every metric) by the former per-metric code
    (tests/bootstrap_reference.py, a frozen copy) and by the one pass, alternating detector by detector in one
    process, so a load on the machine weighs on both alike; and whether their values are equal bit for bit."""
    sys.path.insert(0, str(ROOT / "tests"))
    import bootstrap_reference as ref
    from haldet.evaluation.bootstrap import stratified_draws
    from haldet.evaluation.metrics import METRICS, metrics_on_resamples, scored_items

    old_s = new_s = 0.0
    equal = True
    for values in list(scores.values())[:n_compare]:
        y, s, _, _ = scored_items(labels, values)
        idx = ref.draw_indices(y, 1000, 42)
        start = time.process_time()
        want = ref.metrics_on_resamples(y, s, idx)
        old_s += time.process_time() - start
        del idx
        start = time.process_time()
        got = metrics_on_resamples(y, s, stratified_draws(y, 1000, 42))
        new_s += time.process_time() - start
        equal &= all(np.array_equal(got[m], want[m], equal_nan=True) for m in METRICS)
    return {"detectors": min(n_compare, len(scores)), "old_cpu_s": round(old_s, 2), "new_cpu_s": round(new_s, 2),
            "ratio": round(old_s / new_s, 2) if new_s else None, "bit_identical": bool(equal),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def part_report(sizes: list[int], n_detectors: int, tmp: Path, n_compare: int = 3) -> dict[str, Any]:
    from haldet.evaluation.metrics import evaluate
    from haldet.report.rundata import load_run
    from haldet.testing.synthetic_run import DATASET, MODEL, write_synthetic_run

    runs = []
    for n in sizes:
        root = tmp / f"synth{n}"
        print(f"scale: synthetic run, {n} items x {n_detectors} detectors", file=sys.stderr, flush=True)
        start = time.perf_counter()
        write_synthetic_run(root, n_items=n, n_detectors=n_detectors)
        write_s = time.perf_counter() - start
        start, start_cpu = time.perf_counter(), time.process_time()
        data = load_run(root).cell_scores(DATASET, MODEL)
        assert data is not None and len(data.scores) == n_detectors
        read = {"wall_s": round(time.perf_counter() - start, 3), "cpu_s": round(time.process_time() - start_cpu, 3)}
        start, start_cpu = time.perf_counter(), time.process_time()
        for values in data.scores.values():
            evaluate(data.labels, values, n_boot=1000)
        boot = {"wall_s": round(time.perf_counter() - start, 3), "cpu_s": round(time.process_time() - start_cpu, 3),
                "loadavg": [round(x, 2) for x in os.getloadavg()]}
        report = timed_child([sys.executable, "-m", "haldet", "report", str(root), "--out", str(tmp / f"rep{n}")])
        report["loadavg"] = [round(x, 2) for x in os.getloadavg()]
        versus = old_vs_new(data.labels, data.scores, n_compare) if n_compare else None
        runs.append({"items": n, "test_items": len(data.ids), "write_run_s": round(write_s, 2),
                     "run_bytes": sum(p.stat().st_size for p in root.rglob("*") if p.is_file()),
                     "store_read_scores": read, "bootstrap_cis": boot, "haldet_report": report,
                     "bootstrap_old_vs_new": versus,
                     "cpu_s": {"store_read_scores": read["cpu_s"], "bootstrap_cis": boot["cpu_s"],
                               "haldet_report": report["cpu_s"]}})
    return {"sizes": sizes, "detectors": n_detectors, "n_boot": 1000, "runs": runs,
            "growth_cpu": growth(sizes, runs, "cpu_s")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parts", default="model,flow,report")
    parser.add_argument("--model-sizes", default="50,200")
    parser.add_argument("--model-detectors", default="perplexity,ln_entropy")
    parser.add_argument("--flow-sizes", default="50,200,1000,5000")
    parser.add_argument("--report-sizes", default="1000,10000,100000")
    parser.add_argument("--detectors", type=int, default=17)
    parser.add_argument("--compare-old", type=int, default=3,
                        help="detectors whose resampled metrics are also timed by the former code (0: none)")
    parser.add_argument("--store", metavar="NAME", help="write the result to benchmarks/results/NAME.json")
    parser.add_argument("--check", metavar="NAME",
                        help="compare with benchmarks/results/NAME.json; exit 1 when a figure drifted past its noise")
    args = parser.parse_args()
    sizes = {k: [int(x) for x in getattr(args, f"{k}_sizes").split(",")] for k in ("model", "flow", "report")}
    parts = args.parts.split(",")
    out: dict[str, Any] = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0],
                           "omp_threads": os.environ.get("OMP_NUM_THREADS")}
    with tempfile.TemporaryDirectory() as tmp:
        if "model" in parts:
            out["model"] = part_model(sizes["model"], args.model_detectors.split(","), Path(tmp))
        if "flow" in parts:
            out["flow"] = part_flow(sizes["flow"], Path(tmp))
        if "report" in parts:
            out["report"] = part_report(sizes["report"], args.detectors, Path(tmp), args.compare_old)
    out["loadavg"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    finish("scale", out, args.store, args.check)


if __name__ == "__main__":
    main()
