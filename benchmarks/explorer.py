"""`haldet view` responsiveness on a large synthetic run (haldet.testing.synthetic_run: N items x D detectors,
every stage log an explorer page reads). Times, over HTTP through the app (FastAPI TestClient, no network):
opening the run and reading every cell's logs once (what `haldet view` does before it serves: item tables and the
evidence logs' byte-offset indexes), then the first items page a user sees, further items pages (a filter, a text
search, a sort by a detector, a far page), the first and further item pages, a detector page (curves only) and one
with a paired comparison (first: its bootstrap; then cached). CPU seconds of this process for the first requests
are reported too (`cpu_s`): on a shared machine they are what the code costs. Each further figure is the median of
`--repeat` requests. Prints JSON. Usage:
  python benchmarks/explorer.py [--n 100000] [--detectors 17] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

CPU: dict[str, float] = {}


def timed(client, url: str, params: dict | None = None, cpu: str = "") -> float:
    """Wall seconds of one request (and, under `cpu`, this process's CPU seconds: robust to a shared machine)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    reply = client.get(url, params=params)
    seconds = time.perf_counter() - start
    if cpu:
        CPU[cpu] = round(time.process_time() - start_cpu, 4)
    if reply.status_code != 200:
        raise SystemExit(f"{url} {params}: HTTP {reply.status_code}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--detectors", type=int, default=17)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from fastapi.testclient import TestClient

    from haldet.explorer.app import create_app
    from haldet.explorer.data import Explorer
    from haldet.testing.synthetic_run import DATASET, MODEL, item_id, write_synthetic_run

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        start = time.perf_counter()
        write_synthetic_run(root, n_items=args.n, n_detectors=args.detectors)
        write_s = time.perf_counter() - start
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        start, start_cpu = time.perf_counter(), time.process_time()
        explorer = Explorer([root])
        for c in explorer.cells():  # what `haldet view` does before it serves (haldet.explorer.serve)
            c.preload()
        open_s = time.perf_counter() - start
        CPU["open_and_preload"] = round(time.process_time() - start_cpu, 4)
        client = TestClient(create_app(explorer))
        cell = {"run": 0, "dataset": DATASET, "model": MODEL}

        def det(k: int) -> str:
            return f"det{k % args.detectors}"

        overview_s = timed(client, "/")
        first_items_s = timed(client, "/items", cell, cpu="first_items_page")
        warm = {
            "items_page": {**cell},
            "items_filter_label_split": {**cell, "label": "hallucination", "split": "test"},
            "items_false_positives": {**cell, "err": f"fp:{det(3)}"},
            "items_text_search": {**cell, "q": "fact number 4242?"},
            "items_sort_by_detector": {**cell, "sort": det(5), "det": [det(5), det(6)]},
            "items_far_page": {**cell, "page": args.n // 100},
        }
        warm_s = {name: statistics.median(timed(client, "/items", q) for _ in range(args.repeat))
                  for name, q in warm.items()}
        first_item_s = timed(client, f"/item/{item_id(args.n // 2 + 1)}", cpu="first_item_page")
        timed(client, f"/item/{item_id(args.n // 2 + 2)}", cpu="second_item_page")
        item_s = statistics.median(timed(client, f"/item/{item_id(k * 7919 % args.n)}") for k in range(args.repeat))
        curves_s = timed(client, "/detector", {**cell, "name": det(2)}, cpu="detector_page_curves")
        first_detector_s = timed(client, "/detector", {**cell, "name": det(0), "vs": det(1)}, cpu="detector_page_first")
        detector_s = statistics.median(timed(client, "/detector", {**cell, "name": det(0), "vs": det(1)})
                                       for _ in range(args.repeat))
    print(json.dumps({
        "n_items": args.n, "n_detectors": args.detectors, "run_bytes": size, "write_run_s": round(write_s, 2),
        "open_and_preload_s": round(open_s, 4), "overview_s": round(overview_s, 4),
        "first_items_page_s": round(first_items_s, 4),
        "items_warm_median_s": {k: round(v, 4) for k, v in warm_s.items()},
        "first_item_page_s": round(first_item_s, 4), "detector_page_curves_s": round(curves_s, 4),
        "item_page_warm_median_s": round(item_s, 4),
        "detector_page_paired_first_s": round(first_detector_s, 4),
        "detector_page_paired_median_s": round(detector_s, 4), "cpu_s": CPU,
        "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(), "python": sys.version.split()[0],
    }, indent=2))


if __name__ == "__main__":
    main()
