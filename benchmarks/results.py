"""Stored benchmark figures: what docs/speed.md and docs/scale.md print, and what a rerun is checked against.

A benchmark run with `--store NAME` writes benchmarks/results/NAME.json: its figures under "data", with the machine
(CPU model, cores, Python, numpy), the load average at the start and at the end, the commit and the date, so
every number in the docs says where it came from (benchmarks/render_docs.py renders the tables from these files).
`--check NAME` compares a fresh run with the stored figures and exits 1, naming each figure, when one moved by
more than its noise: a relative tolerance per kind of figure (`NOISE`), wide for seconds because this machine is
shared, narrow for memory and for old/new ratios measured alternately in one process. Every stored run also
times a fixed reference workload at its start and end (`reference_seconds`); a check divides its seconds by how
many times slower the machine runs that workload now, so a slow spell of a shared VM is not read as slower code.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
NOISE = {  # figure name -> relative drift still counted as noise
    "wall_s": 0.35,      # wall seconds: other jobs on a shared 2-core machine
    "cpu_s": 0.30,       # CPU seconds: caches and memory bandwidth are shared too
    "peak_rss_mb": 0.10,
    "ratio": 0.30,       # old / new, alternated in one process
}
SECONDS = ("wall_s", "cpu_s")  # the figures a slower machine inflates


# the fields that name one run in a list of runs, most specific first: (mode, length) for long_inputs.py's runs,
# items for the scale runs
MATCH_BY = (("mode", "length"), ("items",))


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy

    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": numpy.__version__, "omp_threads": os.environ.get("OMP_NUM_THREADS")}


def commit() -> str:
    root = RESULTS.parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def reference_seconds(rounds: int = 5) -> dict[str, float]:
    """How fast this machine is right now: the median wall and thread-CPU seconds of `rounds` timings of one fixed
    single-threaded workload (float32 matrix products, a sort, a JSON round trip: arithmetic, memory and the
    interpreter, ~70 ms). Stored with every result and taken again by `--check`, it tells a slow spell of a shared VM
    (the same commit's report figures 60-75% dearer on one afternoon than on another) from slower code. Both clocks:
    other processes sharing the cores slow the wall clock only, a slower host both."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((384, 384), dtype=np.float32)
    values = rng.standard_normal(400_000)
    doc = {"rows": [{"id": f"item/{i}", "score": i * 0.5, "tokens": list(range(8))} for i in range(3000)]}
    walls, cpus = [], []
    with threadpool_limits(1):
        for _ in range(rounds):
            wall, cpu = time.perf_counter(), time.thread_time()
            for _ in range(20):
                matrix @ matrix
            np.sort(values)
            for _ in range(2):
                json.loads(json.dumps(doc))
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
    return {"wall_s": round(statistics.median(walls), 4), "cpu_s": round(statistics.median(cpus), 4)}


_STARTED = commit()  # the code measured: the commit when the benchmark started (imported this module)
_REFERENCE_AT_START = reference_seconds()
# the load before the benchmark's own work (the load at the end counts the benchmark itself: 2 threads read as a
# busy 2-core machine)
_LOAD_AT_START = [round(x, 2) for x in os.getloadavg()]


def stamped(name: str, data: dict[str, Any], command: str, reference: list[dict[str, float]]) -> dict[str, Any]:
    return {"benchmark": name, "command": command, "machine": machine(),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "loadavg_start": _LOAD_AT_START, "commit": _STARTED,
            "reference_s": reference, "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "data": data}


def load(name: str) -> dict[str, Any]:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"no stored figures {path}: run the benchmark with --store {name} first")
    return json.loads(path.read_text())


def drift(stored: Any, now: Any, path: str = "", seen: list[str] | None = None,
          slower: dict[str, float] | None = None) -> list[str]:
    """Every figure named in NOISE that is in both and moved by more than its noise (relative to the stored one).
    Lists of runs are matched by the fields that name a run (`MATCH_BY`: a rerun at other sizes or lengths compares
    the runs both have); `seen` collects the figures compared. Seconds are compared divided by `slower[clock]`, how
    many times slower this machine runs the reference workload on that clock than when the figures were stored."""
    out: list[str] = []
    seen = [] if seen is None else seen
    if isinstance(stored, dict) and isinstance(now, dict):
        for key in sorted(stored.keys() & now.keys()):
            here = f"{path}.{key}" if path else key
            old, new = stored[key], now[key]
            if key in NOISE and isinstance(old, (int, float)) and isinstance(new, (int, float)) and old:
                seen.append(here)
                scaled = new / (slower or {}).get(key, 1.0)
                if abs(scaled - old) / abs(old) > NOISE[key]:
                    speed = f"{scaled:.4g} at the stored run's speed; " if scaled != new else ""
                    out.append(f"{here}: stored {old}, now {new} ({speed}{(scaled - old) / old:+.0%}; noise "
                               f"±{NOISE[key]:.0%})")
            else:
                out += drift(old, new, here, seen, slower)
    elif isinstance(stored, list) and isinstance(now, list):
        fields = next((f for f in MATCH_BY if all(isinstance(r, dict) and set(f) <= r.keys() for r in stored + now)),
                      None)
        if fields is not None:
            def ident(r: dict[str, Any]) -> str:
                return ",".join(f"{f}={r[f]}" for f in fields)

            by_ident = {ident(r): r for r in now}
            for old in stored:
                if ident(old) in by_ident:
                    out += drift(old, by_ident[ident(old)], f"{path}[{ident(old)}]", seen, slower)
        elif len(stored) == len(now):
            for i, (old, new) in enumerate(zip(stored, now, strict=True)):
                out += drift(old, new, f"{path}[{i}]", seen, slower)
    return out


def other_machine(stored: dict[str, Any]) -> str:
    """What differs between the machine of the stored figures and this one (CPU model, cores, threads), or "":
    seconds compared across machines say as much about the machines as about the code."""
    now = machine()
    return ", ".join(f"{key} {stored.get(key)!r} then, {now.get(key)!r} now" for key in ("cpu", "cores", "omp_threads")
                     if stored.get(key) != now.get(key))


def machine_speed(stored: dict[str, Any], reference: list[dict[str, float]], name: str) -> dict[str, float]:
    """How many times slower this machine ran the reference workload now (the mean of this run's start and end) than
    when the stored figures were taken, per clock (`wall_s`, `cpu_s`; none for figures stored without it), said on
    stderr."""
    then = stored.get("reference_s")
    if not then:
        print(f"benchmarks/results/{name}.json was stored without the reference workload: seconds are compared as "
              "measured, whatever the machine's speed then and now (store it again to compare at equal speed)",
              file=sys.stderr)
        return {}
    slower = {clock: statistics.mean(r[clock] for r in reference) / statistics.mean(r[clock] for r in then)
              for clock in SECONDS}
    print(f"MACHINE SPEED: the reference workload ran {slower['wall_s']:.2f}x as slow in wall time and "
          f"{slower['cpu_s']:.2f}x in CPU time as when benchmarks/results/{name}.json was stored (now "
          f"{statistics.mean(r['wall_s'] for r in reference):.4f} s, then "
          f"{statistics.mean(r['wall_s'] for r in then):.4f} s): wall and CPU seconds are compared divided by "
          "those", file=sys.stderr)
    return slower


def command_line() -> str:
    """This benchmark's command as it was run, quoted so that it can be run again as written (an empty argument
    stays `''`)."""
    return "python " + shlex.join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def finish(name: str, data: dict[str, Any], store: str | None, check: str | None) -> None:
    """After a benchmark: store its figures, and/or check them against stored ones (exit 1 on drift)."""
    command = command_line()
    reference = [_REFERENCE_AT_START, reference_seconds()]
    if check:
        stored = load(check)
        seen: list[str] = []
        elsewhere = other_machine(stored.get("machine", {}))
        if elsewhere:
            print(f"ANOTHER MACHINE than benchmarks/results/{check}.json's ({elsewhere}): a drift below may be the "
                  "machine's, not the code's; compare on the stored machine, or store this machine's figures under "
                  "a name of their own", file=sys.stderr)
        slower = machine_speed(stored, reference, check)
        moved = drift(stored["data"], data, seen=seen, slower=slower)
        if not seen:
            print(f"NOTHING TO CHECK: no figure of this run is in benchmarks/results/{check}.json (other parts or "
                  "sizes?)", file=sys.stderr)
            raise SystemExit(1)
        if moved:
            print(f"FIGURES DRIFTED from benchmarks/results/{check}.json (stored {stored['date']}, commit "
                  f"{stored['commit']}, load {stored['loadavg']}; now load {[round(x, 2) for x in os.getloadavg()]}):",
                  file=sys.stderr)
            for line in moved:
                print("  " + line, file=sys.stderr)
            raise SystemExit(1)
        print(f"{len(seen)} figures within noise of benchmarks/results/{check}.json", file=sys.stderr)
    if store:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{store}.json").write_text(json.dumps(stamped(name, data, command, reference), indent=2) + "\n")
        print(f"stored benchmarks/results/{store}.json", file=sys.stderr)
