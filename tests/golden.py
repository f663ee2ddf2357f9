"""Golden outputs for a refactor that must not change behaviour.

Recording: `HALDET_GOLDEN_DIR=DIR pytest ...` makes every in-process run (every `RunStore.write_results`) also
leave its last results under DIR, one JSON file per (test, run directory; CLI subprocesses too, through
`tests/golden_site/sitecustomize.py`), with the columns that measure time
removed (they differ between any two runs). Comparing: `python tests/golden.py BEFORE AFTER` lists every file
and row whose values differ, and exits 1 if any does. A `results.json` pair from two `make run`s compares the same way
(`python tests/golden.py runs/a/results.json runs/b/results.json`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

TIMED = re.compile(r"(_s$|_s_item$|seconds|^cost|cost@|^gen_s|_ms$)")


def untimed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without the columns that measure wall time (and the cost columns derived from it)."""
    return [{k: v for k, v in row.items() if not TIMED.search(k)} for row in rows]


def install(directory: Path) -> None:
    """Wrap `RunStore.write_results` so each run's final rows land in `directory` (keyed by the running test)."""
    from haldet.store import RunStore

    directory.mkdir(parents=True, exist_ok=True)
    original = RunStore.write_results

    def recording(self: RunStore, rows: list[dict[str, Any]]) -> None:
        original(self, rows)
        test = os.environ.get("PYTEST_CURRENT_TEST", "outside-a-test").split(" (")[0]
        where = re.split(r"pytest-\d+/", str(self.root.resolve()))[-1]  # stable across sessions
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{test}__{where}")
        if len(name) > 200:  # a file name has at most 255 bytes: a long one keeps its start and a digest of the rest
            name = name[:180] + "__" + hashlib.sha1(name.encode()).hexdigest()[:16]
        name += ".json"
        (directory / name).write_text(json.dumps(untimed(rows), indent=1, sort_keys=True, default=str))

    RunStore.write_results = recording  # type: ignore[method-assign]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def differences(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    out = []
    if len(before) != len(after):
        out.append(f"{len(before)} rows before, {len(after)} after")
    for i, (a, b) in enumerate(zip(before, after, strict=False)):
        for key in sorted(set(a) | set(b)):
            if not _same(a.get(key), b.get(key)):
                out.append(f"row {i} ({a.get('detector')}/{a.get('metric')}) {key}: {a.get(key)!r} -> {b.get(key)!r}")
    return out


def _load(path: Path) -> list[dict[str, Any]]:
    return untimed(json.loads(path.read_text()))


def main(before: Path, after: Path) -> int:
    pairs = ([(before, after)] if before.is_file() else
             [(before / p.name, after / p.name) for p in sorted(before.glob("*.json"))])
    bad = 0
    if before.is_dir():
        missing = sorted({p.name for p in before.glob("*.json")} ^ {p.name for p in after.glob("*.json")})
        for name in missing:
            print(f"only on one side: {name}")
        bad += len(missing)
    for a, b in pairs:
        if not b.exists():
            continue
        diff = differences(_load(a), _load(b))
        for line in diff[:20]:
            print(f"{a.name}: {line}")
        bad += bool(diff)
    print(f"{len(pairs)} compared, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
