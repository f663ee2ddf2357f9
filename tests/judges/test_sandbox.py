"""The execution judge's sandbox holds against the escapes a hostile answer would try: children that `setsid`
(keeping or closing the output pipe), a fork flood, writes outside the work directory, and network sockets,
including the raw `_socket` module that bypasses the judge's socket preamble. Without namespaces the judge
refuses unless the user opts in, and then still kills the whole tracked tree."""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from haldet.errors import HaldetError
from haldet.judges import sandbox
from haldet.judges.execution import ExecResult, run_python
from repo_paths import REPO

needs_namespaces = pytest.mark.skipif(bool(sandbox.namespace_support()),
                                      reason=f"no namespaces here: {sandbox.namespace_support()}")


def _alive_with(token: str) -> list[int]:
    """Pids of live processes whose command line holds `token`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if token.encode() in cmdline and state != "Z":
                found.append(int(entry))
    return found


def _run_bounded(source: str, timeout: float = 3.0) -> ExecResult:
    """run_python in a thread; fails (instead of hanging the suite) if it does not return within a minute."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(run_python(source, timeout=timeout, memory_mb=512)),
                              daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the judge hung on this program"
    return out[0]


def _setsid_child(token: str, close_output: bool) -> str:
    child = ("import os, sys, time\n"
             "os.setsid()\n"
             + ("os.close(1); os.close(2)\n" if close_output else "")
             + "time.sleep(120)\n")
    return (f"import subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', {child!r}, {token!r}])\n")


@needs_namespaces
@pytest.mark.parametrize("close_output", [False, True])
def test_setsid_children_die_with_the_program(close_output: bool) -> None:
    token = f"haldet-escape-{secrets.token_hex(6)}"
    result = _run_bounded(_setsid_child(token, close_output))
    assert result.passed, result.output
    assert _alive_with(token) == []  # the setsid child is gone, whether or not it kept the pipe open


@needs_namespaces
@pytest.mark.skipif(not sandbox.process_cap(), reason="root without a writable pids cgroup: the count is not capped")
def test_fork_flood_is_capped_and_cleaned_up() -> None:
    token = f"haldet-flood-{secrets.token_hex(6)}"
    source = ("import subprocess, sys\nstarted = refused = 0\n"
              "for _ in range(200):\n"
              "    try:\n"
              f"        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {token!r}])\n"
              "        started += 1\n"
              "    except OSError:\n"
              "        refused += 1\n"
              "print('started', started, 'refused', refused)\n")
    result = _run_bounded(source, timeout=20.0)
    started = int(result.output.split("started")[1].split()[0])
    assert started < sandbox.NPROC and "refused" in result.output, result.output
    assert _alive_with(token) == []


@needs_namespaces
def test_writes_outside_the_work_directory_fail(tmp_path: Path) -> None:
    targets = [tmp_path / "escape.txt", Path.home() / f".haldet-escape-{secrets.token_hex(4)}",
               Path(f"/tmp/haldet-escape-{secrets.token_hex(4)}"), Path(sys.prefix) / "haldet-escape.txt"]
    source = ("import os\n"
              f"for path in {[str(t) for t in targets]!r}:\n"
              "    try:\n"
              "        open(path, 'w').write('x')\n"
              "    except OSError as exc:\n"
              "        print('refused', exc.errno)\n"
              "open('inside.txt', 'w').write('ok')\n"  # the work directory itself stays writable
              "print('inside', open('inside.txt').read())\n")
    result = _run_bounded(source)
    assert result.passed and "inside ok" in result.output, result.output
    assert [t for t in targets if t.exists()] == []


@needs_namespaces
def test_no_network_even_through_the_raw_socket_module() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    port = server.getsockname()[1]
    source = ("import _socket\n"  # below the preamble that replaces socket.socket
              "s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n"
              "s.settimeout(2)\n"
              "try:\n"
              f"    s.connect(('127.0.0.1', {port}))\n"
              "    print('CONNECTED')\n"
              "except OSError as exc:\n"
              "    print('BLOCKED', exc)\n")
    try:
        result = _run_bounded(source)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
    assert "BLOCKED" in result.output and "CONNECTED" not in result.output, result.output


def test_without_namespaces_code_is_refused_unless_opted_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "namespace_support", lambda: "user namespaces are disabled")
    monkeypatch.delenv(sandbox.OPT_IN, raising=False)
    with pytest.raises(HaldetError, match="namespaces") as err:
        run_python("print(1)\n", timeout=3.0, memory_mb=512)
    assert sandbox.OPT_IN in err.value.hint

    # opted in: rlimits and the tracked-tree kill still take down a setsid child that keeps the pipe open
    monkeypatch.setenv(sandbox.OPT_IN, "1")
    token = f"haldet-unsandboxed-{secrets.token_hex(6)}"
    source = _setsid_child(token, close_output=False) + "import time\ntime.sleep(0.5)\n"
    result = _run_bounded(source)
    assert result.passed, result.output
    assert _alive_with(token) == []


@needs_namespaces
def test_a_sandbox_that_cannot_be_set_up_stops_with_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # a program cannot fake that failure (the token it would need is gone once it runs): it just fails
    faked = run_python("import sys\nprint('haldet-sandbox 0123abcd: cannot bind', file=sys.stderr)\nsys.exit(121)\n",
                       timeout=3.0, memory_mb=512)
    assert not faked.passed and faked.returncode == 121
    # without a PID namespace sandbox_init refuses to go on: no verdict, one message
    monkeypatch.setattr(sandbox, "_UNSHARE", ("--user", "--map-root-user", "--net", "--mount"))
    with pytest.raises(HaldetError, match="could not be set up: not the first process"):
        run_python("print(1)\n", timeout=3.0, memory_mb=512)


@needs_namespaces
def test_an_interpreter_living_under_tmp_still_starts(tmp_path: Path) -> None:
    """A checkout (and its venv) under /tmp, as a CI clone may be: /tmp is hidden inside the sandbox, so the
    interpreter's installation is bound back read-only, and the program still cannot write there."""
    import subprocess

    venv = tmp_path / "venv"  # tmp_path lives under /tmp
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    probe = ("from haldet.judges.execution import run_python\n"
             "ok = run_python('print(40 + 2)', timeout=5, memory_mb=512)\n"
             f"bad = run_python(\"open({str(venv / 'x')!r}, 'w')\", timeout=5, memory_mb=512)\n"
             "print(ok.passed, '42' in ok.output, bad.passed)\n")
    src = REPO / "src"
    site = [p for p in sys.path if p.endswith("site-packages")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), *site])}
    res = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["True", "True", "False"], res.stdout + res.stderr[-1000:]
