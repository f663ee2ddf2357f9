"""Execution judge for Python code tasks (HumanEval, MBPP): run the task's tests against the answer's code.

Program = the task prompt (HumanEval: signature + docstring, and any helper it defines), then the answer's code,
then the tests. The code is the fenced block that defines the entry point (else the first fenced block); an
answer without a fence that does not define the entry point is read as a HumanEval-style completion of the
prompt's function body. Tests: HumanEval's `check(candidate)` source (called with the entry point), or a list
of MBPP `assert` lines (with optional setup code).

Isolation (haldet.judges.sandbox, where exactly what is and is not contained is listed): the program runs in a
fresh temporary directory (deleted afterwards) with `python -I`, a minimal environment and rlimits, as PID 1 of
its own PID, user, mount and network namespaces: every process it starts dies with it, nothing outside its
directory is writable, no network peer is reachable. Where namespaces are unavailable the judge refuses to run
code unless HALDET_EXEC_UNSANDBOXED=1. pass -> correct; a failed assertion, an exception or the time limit ->
hallucination, with the failing test or the error in `reasoning`.
"""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from haldet.judges.base import Judge, Pair, Undecided, Verdict, register
from haldet.judges.sandbox import check_allowed, run_contained
from haldet.judges.text import is_abstention
from haldet.schema import Category, Generation, Instance, Label

# Runs before the program: no sockets (even without a network namespace), no subprocesses from the code.
_PREAMBLE = '''\
import socket as _s
def _no_network(*a, **k):
    raise OSError("network access is disabled in the haldet execution judge")
_s.socket = _no_network
_s.create_connection = _no_network
_s.getaddrinfo = _no_network
del _s
'''

_PASSED = "HALDET-EXEC-PASSED"


@dataclass
class ExecResult:
    passed: bool
    timed_out: bool
    returncode: int
    output: str


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


_CODE_LINE = re.compile(r"^(\s+\S|(def|class|import|from|return|for|while|if|with|try)\b)")


def extract_code(answer: str, entry_point: str = "") -> tuple[str, str]:
    """(code, how). The answer is cut at its fence lines (```); among the pieces, the first that defines the
    entry point and parses wins, then the first that defines it at all, then the first fenced block. Chat models
    often open with code and no opening fence ("def f(): ...```\nExample usage:```python ..."): when the first
    fence is a bare ``` after code-looking lines, the text before it is a code block."""
    lines = answer.split("\n")
    fences = [i for i, line in enumerate(lines) if line.lstrip().startswith("```")]
    if not fences:
        return answer, "whole answer"
    bounds = [-1, *fences, len(lines)]
    pieces = ["\n".join(lines[a + 1 : b]).strip("\n") for a, b in pairwise(bounds)]
    if entry_point:
        defines = re.compile(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
        with_def = [p for p in pieces if defines.search(p)]
        for piece in with_def:
            if _parses(piece):
                return piece, "code block defining the entry point"
        if with_def:
            return with_def[0], "code block defining the entry point"
    opens_with_code = lines[fences[0]].strip() == "```" and any(_CODE_LINE.match(x) for x in lines[: fences[0]])
    first = 0 if opens_with_code else 1  # piece k lies after fence k-1: fenced pieces alternate from `first`
    for piece in pieces[first::2]:
        if piece.strip():
            return piece, "first code block"
    return answer, "whole answer"


def build_program(instance: Instance, answer: str) -> tuple[str, str]:
    """(program source without tests, how the code was found)."""
    meta = instance.meta
    entry = str(meta.get("entry_point") or "")
    prompt = str(meta.get("prompt") or "")
    code, how = extract_code(answer, entry)
    defines = bool(entry) and re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE) is not None
    if defines or not prompt:
        # the prompt may hold imports and helper functions the solution uses; its own stub is redefined
        return (f"{prompt}\n\n{code}\n" if prompt else f"{code}\n"), how
    # a completion of the prompt's function body (HumanEval style)
    first_line = next((line for line in code.split("\n") if line.strip()), "")
    if not first_line.startswith((" ", "\t")):  # a body must be indented; chat replies often strip it
        code = _indent_body(code)
    return f"{prompt}{code}\n", how + " as a completion of the prompt"


def _indent_body(code: str) -> str:
    """A completion whose first line lost its indentation (chat models often strip it)."""
    lines = code.lstrip("\n").split("\n")
    if len(lines) > 1 and lines[1].startswith("    "):
        return "    " + "\n".join(lines)
    return "\n".join("    " + line if line.strip() else line for line in lines)


def test_source(instance: Instance) -> str:
    meta = instance.meta
    tests = meta.get("tests")
    entry = str(meta.get("entry_point") or "")
    if isinstance(tests, str) and "def check" in tests:
        if not entry:
            raise ValueError("HumanEval-style tests need meta['entry_point']")
        return f"{tests}\n\ncheck({entry})\n"
    setup = str(meta.get("test_setup") or meta.get("test_setup_code") or "")
    lines = tests if isinstance(tests, list) else [tests] if isinstance(tests, str) else []
    if not lines:
        raise ValueError("no tests in meta['tests']")
    return setup + "\n" + "\n".join(str(t) for t in lines) + "\n"


def run_python(source: str, *, timeout: float, memory_mb: int) -> ExecResult:
    """Run a program in a clean temporary directory inside the sandbox; its whole process tree is gone after."""
    workdir = tempfile.mkdtemp(prefix="haldet-exec-")
    try:
        path = Path(workdir) / "program.py"
        path.write_text(_PREAMBLE + "\n" + source + f"\nprint({_PASSED!r})\n")
        result = run_contained(path, timeout=timeout, memory_mb=memory_mb)
        passed = not result.timed_out and result.returncode == 0 and _PASSED in result.output
        return ExecResult(passed=passed, timed_out=result.timed_out, returncode=result.returncode,
                          output=result.output.replace(_PASSED, "").strip())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def failure_summary(result: ExecResult, source: str, timeout: float) -> str:
    """The failing test or error: the last traceback line and the program line it points at."""
    if result.timed_out:
        return f"timed out after {timeout:g}s (killed; an infinite loop or far too slow)"
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    if not lines:
        return f"exited with status {result.returncode} and no output"
    if result.returncode < 0:
        return f"killed by signal {-result.returncode} (memory or CPU limit?): {lines[-1][:200]}"
    error = lines[-1][:300]
    program = source.splitlines()
    located = ""
    for line in reversed(lines):
        match = re.search(r'File ".*program\.py", line (\d+)', line)
        if match:
            idx = int(match.group(1)) - 1 - _PREAMBLE.count("\n") - 1
            if 0 <= idx < len(program):
                located = program[idx].strip()[:300]
            break
    return f"{error}" + (f" at `{located}`" if located else "")


@register("exec:python")
class ExecutionJudge(Judge):
    version = 2

    def __init__(self, timeout: float = 10.0, memory_mb: int = 1024, workers: int = 2) -> None:
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.workers = workers

    def fingerprint(self) -> object:
        return [self.id, self.timeout, self.memory_mb]

    def applies(self, instance: Instance) -> bool:
        return instance.task_type == "code" and bool(instance.meta.get("tests"))

    def judge(self, instance: Instance, generation: Generation) -> Label | Undecided:
        answer = generation.response
        if not answer.strip():
            return self.label(instance, Category.INVALID, "empty response")
        if "```" not in answer and "def " not in answer and is_abstention(answer):
            return self.label(instance, Category.ABSTENTION, "the answer declines to write code")
        program, how = build_program(instance, answer)
        try:
            tests = test_source(instance)
        except ValueError as exc:
            return Undecided(f"exec:python: {exc}")
        source = program + "\n" + tests
        result = run_python(source, timeout=self.timeout, memory_mb=self.memory_mb)
        if result.passed:
            return self.label(instance, Category.CORRECT, f"all tests pass (code: {how})")
        return self.label(instance, Category.HALLUCINATION,
                          f"tests fail: {failure_summary(result, source, self.timeout)} (code: {how})")

    def judge_many(self, pairs: Sequence[Pair], on_done: Callable[[int, Verdict], None]) -> None:
        """Programs run in parallel threads (each waits on its own subprocess). Without a sandbox (and no
        opt-in) this raises before any code runs."""
        if any(self.applies(inst) for inst, _ in pairs):
            check_allowed()
        if self.workers <= 1 or len(pairs) <= 1:
            super().judge_many(pairs, on_done)
            return
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = {pool.submit(self.judge, inst, gen): i for i, (inst, gen) in enumerate(pairs)}
            for future in as_completed(futures):
                on_done(futures[future], future.result())
