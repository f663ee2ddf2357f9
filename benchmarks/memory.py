"""Peak resident memory (RSS) per stage of the default run (`haldet run` with no detector options) on N items.

A thread samples this process's RSS every `--interval` seconds; each sample is filed under the stage running at that
moment (the stages announce themselves through the run's progress factory: `generate`, `sample`, `detectors`, ...;
`start` is everything before the first stage: imports, data and model loading). Reported: the peak RSS per stage,
the process's peak RSS over the whole run (`ru_maxrss`, which also sees peaks shorter than the interval), the run's
settings that size the decoding pools (`decode_rows`, the KV pool budget) and the wall time. Every stage computes
(a fresh run directory). Prints JSON. Usage:
  python benchmarks/memory.py [--n 40] [--decode-rows R] [--threads N] [--kv-pool-gb G]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from haldet.config import RunConfig
from haldet.util.threads import configure_threads

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """This process's resident set size now (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class StagePeaks:
    """The highest RSS seen while each stage was the current one."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.stage = "start"
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.note()
            time.sleep(self.interval)

    def note(self) -> None:
        rss = rss_bytes()
        self.peaks[self.stage] = max(self.peaks.get(self.stage, 0), rss)

    def progress(self, description: str, total: int) -> Callable[[int], None]:
        """The run's progress factory: a stage starting makes it the current one."""
        self.note()  # the last moment of the previous stage
        self.stage = description.split(" [")[0].split(":")[0].strip()
        return lambda n: None

    def __enter__(self) -> StagePeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.note()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="items (the default run uses 200)")
    parser.add_argument("--decode-rows", type=int, default=None, help="rows decoded together (default: config's)")
    parser.add_argument("--kv-pool-gb", type=float, default=None, help="KV pool budget in GiB (default: haldet's)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    configure_threads(args.threads)
    import haldet as pipeline
    from haldet.backends.hf import pool_budget

    if args.kv_pool_gb is not None:
        pool_budget.KV_POOL_BYTES = int(args.kv_pool_gb * (1 << 30))
    overrides: dict[str, Any] = {"limit": args.n}
    if args.decode_rows is not None:
        overrides["decode_rows"] = args.decode_rows
    config = RunConfig.model_validate(overrides)
    before = rss_bytes()
    with tempfile.TemporaryDirectory() as tmp, StagePeaks(args.interval) as peaks:
        start = time.perf_counter()
        _, cells = pipeline.run(config, Path(tmp) / "run", progress=peaks.progress)
        wall = time.perf_counter() - start
    mb = 1 << 20
    print(json.dumps({
        "n": args.n, "decode_rows": config.decode_rows, "kv_pool_bytes": pool_budget.KV_POOL_BYTES,
        "detectors": config.detectors, "rss_before_run_mb": round(before / mb),
        "peak_rss_by_stage_mb": {stage: round(v / mb) for stage, v in peaks.peaks.items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "wall_s": round(wall, 1), "cell_errors": [c.error for c in cells if c.error],
        "detector_errors": {d.name: d.error for c in cells for d in c.detectors if d.error},
    }, indent=2))


if __name__ == "__main__":
    main()
