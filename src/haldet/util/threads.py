"""How many CPU threads torch uses: the cores this process may actually run on, not the machine's count.

`os.cpu_count()` counts every core of the host; a container or a `taskset` sees fewer (`sched_getaffinity`), and
a cgroup CPU quota (`cpu.max`, or `cpu.cfs_quota_us` on cgroup v1) caps them further. Torch's default of one
thread per host core oversubscribes such a machine, and several processes each doing so nearly stall each other.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

from haldet.errors import HaldetError

_CGROUP = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = _CGROUP) -> float | None:
    """CPUs allowed by the cgroup quota (quota / period), or None when there is no quota."""
    v2 = root / "cpu.max"
    try:
        if v2.exists():
            parts = v2.read_text().split()  # "<quota|max> <period>"
            if not parts or parts[0] == "max":
                return None
            return int(parts[0]) / int(parts[1] if len(parts) > 1 else 100000)
        v1q, v1p = root / "cpu" / "cpu.cfs_quota_us", root / "cpu" / "cpu.cfs_period_us"
        if v1q.exists() and v1p.exists():
            quota_us = int(v1q.read_text().strip())
            return None if quota_us <= 0 else quota_us / int(v1p.read_text().strip())
    except (OSError, ValueError):  # an unreadable or odd cgroup file: no quota known
        return None
    return None


def available_cores(root: Path = _CGROUP) -> int:
    """Cores this process may use: its CPU affinity, capped by the cgroup quota (rounded up), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


def thread_count(requested: int | None = None) -> int:
    """Threads to use: `requested`, else a positive OMP_NUM_THREADS the user set, else the available cores."""
    if requested is not None:
        if requested < 1:
            raise HaldetError(f"--threads must be at least 1 (got {requested})", where="--threads")
        return requested
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return available_cores()


def configure_threads(requested: int | None = None) -> int:
    """Fix the thread count for this process (OMP_NUM_THREADS, read when torch loads, and torch itself if it is
    already loaded); returns it. The hf backend applies `thread_count()` again when it starts."""
    n = thread_count(requested)
    os.environ["OMP_NUM_THREADS"] = str(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    return n


def runtime_info() -> dict[str, Any]:
    """What the manifest records about the CPU set-up (threads do not change answers; they change timings)."""
    import torch

    return {"torch_threads": torch.get_num_threads(), "available_cores": available_cores(),
            "host_cpu_count": os.cpu_count()}
