"""Run a command and write its own peak resident memory and CPU seconds as JSON: `python peak.py OUT -- CMD...`.

Why a launcher: a child's ru_maxrss counts the address space it was forked (or vforked) from until its exec, so a
child of a large benchmark process reports at least the benchmark's own size, and RUSAGE_CHILDREN reports the largest
child so far. This small process (standard library only, ~10 MB) starts the command and reaps it with `os.wait4`,
whose rusage is that one command's: its peak is its own, above at most this launcher's size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main() -> None:
    out, sep, *cmd = sys.argv[1:]
    if sep != "--" or not cmd:
        raise SystemExit("usage: python peak.py OUT -- CMD...")
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    with open(out, "w") as f:
        json.dump({"peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: kilobytes
                   "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "returncode": code}, f)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
