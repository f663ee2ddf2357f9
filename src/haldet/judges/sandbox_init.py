"""First process inside the execution judge's namespaces (`python -I -B sandbox_init.py TOKEN WORKDIR PROGRAM...`).

It runs as PID 1 of a fresh PID namespace, "root" of a fresh user namespace (mapped to the unprivileged user
outside), in fresh mount and network namespaces. Before it replaces itself with the program it:

1. remounts every mount point read-only, mounts empty private tmpfs on /tmp, /var/tmp and /run and a /dev
   holding only null, zero, random and urandom, and binds WORKDIR (read-write) back in place;
2. caps the number of processes of the sandbox (RLIMIT_NPROC, counted per user namespace);
3. drops every capability from the bounding set and sets no_new_privs, so the program (still uid 0 inside the
   namespace) has no capability left to undo the read-only mounts or to mount anything;
4. execs the program, which thereby becomes PID 1: when it exits, the kernel kills every process left in the
   namespace (a `setsid` or double-forked child included), and killing it from outside does the same.

A step that fails exits with status 121 and a line `haldet-sandbox TOKEN: ...` on stderr (TOKEN: a secret of the
judge, gone from the process once the program runs, so a program cannot fake a setup failure); the judge then
stops with that message rather than run code less contained. Standard library only: it must not import haldet.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

SETUP_FAILED = 121
NPROC = 64

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": _MS_NOATIME,
          "nodiratime": _MS_NODIRATIME, "relatime": _MS_RELATIME, "strictatime": _MS_STRICTATIME}
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38
_DEVICES = ("null", "zero", "random", "urandom")
_HIDDEN = ("/tmp", "/var/tmp", "/run")

_libc = ctypes.CDLL(None, use_errno=True)
_token = ""


def _fail(what: str) -> None:
    print(f"haldet-sandbox {_token}: {what}", file=sys.stderr, flush=True)
    os._exit(SETUP_FAILED)


def _mount(source: str | None, target: str, flags: int) -> int:
    ok = _libc.mount(source.encode() if source else None, target.encode(), None, ctypes.c_ulong(flags), None)
    return 0 if ok == 0 else ctypes.get_errno()


def _mount_points() -> list[tuple[str, int]]:
    """(mount point, its per-mount flags) from /proc/self/mountinfo, outermost first."""
    out = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")  # octal escapes such as \040 for a space
            flags = 0
            for opt in fields[5].split(","):
                flags |= _FLAGS.get(opt, 0)
            out.append((point, flags))
    return out


def _bind_fd(fd: int, target: str, flags: int) -> None:
    """Bind what `fd` (opened before the original was hidden) refers to onto `target`; writable unless
    `flags` say read-only."""
    err = _mount(f"/proc/self/fd/{fd}", target, _MS_BIND)
    if not err:
        err = _mount(None, target, _MS_REMOUNT | _MS_BIND | flags)
    if err:
        _fail(f"cannot bind {target}: {os.strerror(err)}")


def _tmpfs(target: str, options: str) -> None:
    err = _libc.mount(b"tmpfs", target.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV),
                      options.encode())
    if err != 0:
        _fail(f"cannot mount a private tmpfs on {target}: {os.strerror(ctypes.get_errno())}")


def _interpreter_dirs() -> list[str]:
    """The Python installation the program runs on (the venv and its base) where it lives under a directory that
    is about to be hidden (a checkout under /tmp): it is bound back read-only, or the program could not start."""
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(sys.executable))}
    hidden = [os.path.realpath(h) for h in _HIDDEN if os.path.isdir(h)]
    return sorted(d for d in dirs if any(d == h or d.startswith(h + os.sep) for h in hidden))


def read_only_except(workdir: str) -> None:
    """Every mount read-only; /tmp, /var/tmp and /run private and empty (but for the Python installation the
    program needs, read-only); a minimal /dev; `workdir` writable."""
    keep = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
    python = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in _interpreter_dirs()}
    devices = {name: os.open(f"/dev/{name}", os.O_PATH) for name in _DEVICES if os.path.exists(f"/dev/{name}")}
    for point, flags in _mount_points():
        err = _mount(None, point, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags)
        if err and os.path.exists(point):  # a point hidden under another mount cannot be reached: nothing to do
            _fail(f"cannot make {point} read-only: {os.strerror(err)}")
    for hidden in _HIDDEN:
        if os.path.isdir(hidden) and not os.path.islink(hidden):
            _tmpfs(hidden, "size=64m,mode=1777")
    _tmpfs("/dev", "size=1m,mode=755")
    for name, fd in devices.items():
        open(f"/dev/{name}", "w").close()
        _bind_fd(fd, f"/dev/{name}", _MS_NOSUID | _MS_NOEXEC)
    for path, fd in python.items():
        os.makedirs(path, exist_ok=True)
        _bind_fd(fd, path, _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.makedirs(workdir, exist_ok=True)  # inside a private tmpfs when it lives under /tmp
    _bind_fd(keep, workdir, _MS_NOSUID | _MS_NODEV)


def drop_capabilities() -> None:
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            _fail(f"cannot drop capability {cap}: {os.strerror(ctypes.get_errno())}")
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail(f"cannot set no_new_privs: {os.strerror(ctypes.get_errno())}")


def main(argv: list[str]) -> None:
    global _token
    if len(argv) < 4:
        _fail("usage: sandbox_init.py TOKEN WORKDIR PROGRAM [ARGS...]")
    _token, workdir, program = argv[1], os.path.realpath(argv[2]), argv[3:]
    if os.getpid() != 1:
        _fail("not the first process of a new PID namespace")
    read_only_except(workdir)
    resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))
    drop_capabilities()
    os.chdir(workdir)
    try:
        os.execv(program[0], program)
    except OSError as exc:
        _fail(f"cannot start {program[0]}: {exc}")


if __name__ == "__main__":
    main(sys.argv)
