"""The execution judge's sandbox: run model-written Python so that it cannot outlive, escape or reach out.

Contained (Linux with user namespaces, the default on current distributions; checked once per process):

* process tree: the program runs as PID 1 of its own PID namespace (`unshare --pid --fork --kill-child`), so
  when it exits or is killed every process it started dies with it, `setsid` and double-forked children
  included; the outer `unshare` runs in its own session, which is killed whole at the time limit, and every wait
  is bounded. At most 64 processes: RLIMIT_NPROC for an ordinary user; the kernel exempts root from it, so as
  root a `pids` cgroup is created when the cgroup file system is writable (`process_cap()` says which applies;
  as root without a writable cgroup the count is not capped, only the time).
* file system: every mount is read-only except the program's own temporary directory; /tmp, /var/tmp and /run
  are empty private tmpfs mounts (no access to other programs' sockets and files there), /dev holds only null,
  zero, random and urandom; the program keeps no capability that could undo this (bounding set dropped,
  no_new_privs), so it cannot remount, mount or create device nodes.
* network: its own network namespace with no interface but a down loopback; no TCP/UDP/abstract-socket peer is
  reachable. A preamble also replaces `socket.socket` (a second layer, and the only one without namespaces).
* resources: address space, CPU seconds, file size (16 MiB), no core dumps; wall-clock limit.

Not contained: reading files the user running haldet may read (the program's output becomes the label's
reasoning text, so it could copy a readable secret into `annotate.jsonl`); CPU and memory beyond the per-process
rlimits (64 processes x the address-space limit); path-based Unix sockets outside /tmp, /var/tmp and /run that the
user may open (as root: root-owned ones too; run haldet as an ordinary user); kernel exploits.

Without user namespaces (some containers, hardened kernels), none of the namespace layers exist: the judge then
refuses to run code unless `HALDET_EXEC_UNSANDBOXED=1` opts in to rlimits, the socket preamble, and killing the
session plus every descendant seen while it ran (a process that escapes both in between can survive).
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from haldet.errors import HaldetError

OPT_IN = "HALDET_EXEC_UNSANDBOXED"
NPROC = 64
FILE_SIZE = 16 << 20
_INIT = Path(__file__).with_name("sandbox_init.py")
_UNSHARE = ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc",
            "--propagation", "private")
_GRACE = 5.0  # seconds to wait for pipes to close after a kill


class PidsCgroup:
    """A pids cgroup capping the sandbox's process count where the kernel does not apply RLIMIT_NPROC (haldet
    running as root is exempt from it). cgroup v1 `pids` hierarchy or a cgroup v2 `pids` controller in a
    writable hierarchy; absent otherwise (then only RLIMIT_NPROC caps a non-root user's sandbox)."""

    def __init__(self, limit: int) -> None:
        self.path: Path | None = None
        for base in _pids_roots():
            path = base / f"haldet-exec-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(limit))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            self.path = path
            break

    def enter(self) -> None:
        """Move the calling process (a child before exec) into the cgroup."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text("0")

    def remove(self) -> None:
        if self.path is None:
            return
        for _ in range(50):  # the last processes may still be exiting
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)


def _pids_roots() -> list[Path]:
    """Cgroup directories (this process's own) where a child pids cgroup might be created."""
    roots = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, rel = line.split(":", 2)
            if "pids" in controllers.split(","):
                roots.append(Path("/sys/fs/cgroup/pids") / rel.lstrip("/"))
            elif controllers == "" and "pids" in _read(Path("/sys/fs/cgroup") / rel.lstrip("/") /
                                                         "cgroup.subtree_control"):
                roots.append(Path("/sys/fs/cgroup") / rel.lstrip("/"))
    return [r for r in roots if r.is_dir() and os.access(r, os.W_OK)]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@cache
def process_cap() -> str:
    """How the sandbox's process count is capped here: 'RLIMIT_NPROC', 'pids cgroup', or '' (not capped)."""
    if os.geteuid() != 0:
        return "RLIMIT_NPROC"
    group = PidsCgroup(NPROC)
    group.remove()
    return "pids cgroup" if group.path is not None else ""


@dataclass
class Outcome:
    returncode: int
    output: str
    timed_out: bool
    isolated: bool  # ran inside the namespaces
    survivors: int = 0  # processes still alive after the end that had to be killed (unisolated mode only)


@cache
def namespace_support() -> str:
    """'' when the full sandbox works here, else why not (shown to the user when code is refused)."""
    exe = shutil.which("unshare")
    if exe is None:
        return "the `unshare` program (util-linux) is not installed"
    workdir = tempfile.mkdtemp(prefix="haldet-exec-probe-")
    try:
        res = subprocess.run([exe, *_UNSHARE, sys.executable, "-I", "-B", str(_INIT), "probe", workdir,
                              sys.executable, "-I", "-B", "-c", "pass"], capture_output=True, timeout=30,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unshare failed: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if res.returncode != 0:
        return (res.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit status {res.returncode}"])[-1]
    return ""


def check_allowed() -> bool:
    """True when code runs isolated; False when it runs unisolated by the user's opt-in; else a HaldetError."""
    why = namespace_support()
    if not why:
        return True
    if os.environ.get(OPT_IN) == "1":
        return False
    raise HaldetError(
        f"the execution judge runs model-written code and needs Linux user, PID, mount and network namespaces, "
        f"which are not available here ({why})",
        where="execution judge (exec:python)",
        hint=f"enable unprivileged user namespaces (e.g. sysctl user.max_user_namespaces=15000, or "
             f"kernel.unprivileged_userns_clone=1), or label with --judge llm or --judge rule, or set {OPT_IN}=1 "
             "to run the code with resource limits only (no file-system or network isolation; docs/judges.md)")


def run_contained(program: Path, *, timeout: float, memory_mb: int) -> Outcome:
    """Run `python -I -B program` in the sandbox (cwd and only writable place: the program's directory)."""
    isolated = check_allowed()
    workdir = str(program.parent)
    cmd = [sys.executable, "-I", "-B", str(program)]
    token = secrets.token_hex(8)
    if isolated:
        cmd = [shutil.which("unshare") or "unshare", *_UNSHARE, sys.executable, "-I", "-B", str(_INIT), token,
               workdir, *cmd]
    limit = memory_mb * 1024 * 1024
    cpu = int(timeout) + 1

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if not isolated:  # inside the namespaces sandbox_init sets it, counted per user namespace
            resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))

    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    group = PidsCgroup(NPROC) if os.geteuid() == 0 else None  # unshare and the program count too
    try:
        outcome = _supervise(cmd, workdir, env, limits, group, timeout=timeout, isolated=isolated)
    finally:
        if group is not None:
            group.remove()
    marker = f"haldet-sandbox {token}:"
    if isolated and marker in outcome.output:  # the sandbox itself failed: no verdict on the code
        why = outcome.output.split(marker, 1)[1].strip().splitlines()[0]
        raise HaldetError(f"the execution sandbox could not be set up: {why}", where="execution judge (exec:python)",
                          hint=f"report this with the message above; {OPT_IN}=1 runs code without the sandbox "
                               "(docs/judges.md), or label with --judge llm or --judge rule")
    return outcome


def _supervise(cmd: list[str], workdir: str, env: dict[str, str], limits: Callable[[], None],
               group: PidsCgroup | None, *, timeout: float, isolated: bool) -> Outcome:
    """Start the command in its own session, wait at most `timeout`, then kill everything it left behind."""

    def setup() -> None:
        limits()
        if group is not None:
            group.enter()

    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=setup, start_new_session=True)
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    timed_out, chunks = False, []
    while True:
        try:
            out, _ = proc.communicate(timeout=0.1 if not isolated else max(0.0, deadline - time.monotonic()))
            chunks.append(out)
            break
        except subprocess.TimeoutExpired:
            if not isolated:
                seen |= _descendants(proc.pid)
                if proc.poll() is not None:  # the program ended; what still holds the pipe is killed below
                    break
            if time.monotonic() >= deadline:
                timed_out = True
                break
    survivors = 0
    if timed_out or not isolated:
        survivors = _kill(proc, seen)
        chunks.append(_drain(proc))
    if proc.returncode is None:
        proc.wait(timeout=_GRACE)
    return Outcome(returncode=proc.returncode, output=b"".join(c for c in chunks if c).decode("utf-8", "replace"),
                   timed_out=timed_out, isolated=isolated, survivors=survivors)


def _kill(proc: subprocess.Popen[bytes], seen: set[int]) -> int:
    """Kill the session's process group and every tracked descendant; returns how many were still alive."""
    alive = 0
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in seen | _descendants(proc.pid) | _session(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            alive += 1
    return alive


def _drain(proc: subprocess.Popen[bytes]) -> bytes:
    """Output still in the pipe after a kill, waiting at most _GRACE seconds for its writers to close it."""
    try:
        out, _ = proc.communicate(timeout=_GRACE)
        return out or b""
    except subprocess.TimeoutExpired:  # a writer survived every kill: stop reading rather than hang
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return b"\n[haldet: a process kept the output open after the kill; output cut]\n"


def _proc_stats() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, session id)} of every visible process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[int(entry)] = (int(fields[1]), int(fields[3]))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _descendants(root: int) -> set[int]:
    stats = _proc_stats()
    found, frontier = set(), {root}
    while frontier:
        children = {pid for pid, (ppid, _) in stats.items() if ppid in frontier and pid not in found}
        found |= children
        frontier = children
    return found


def _session(sid: int) -> set[int]:
    return {pid for pid, (_, session) in _proc_stats().items() if session == sid and pid != sid}
