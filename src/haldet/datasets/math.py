"""Math and science reasoning: GSM8K, SVAMP (numeric answers) and TheoremQA (theorem-driven questions).

The final answer goes to r+ as a plain string ('42', '2.5'); the worked solution or equation stays in meta.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.rows import BadRow, SkipRow, number_string, require
from haldet.schema import Instance

_CALC = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations, dropped from the shown solution
MATH_INSTRUCTION = ("Solve the problem step by step. On the last line, write 'Answer:' followed by the final "
                    "number only.")


def _number(value: Any, field: str) -> str:
    try:
        return number_string(value)
    except ValueError:
        raise BadRow(field, f"no numeric answer in {str(value)[:60]!r}") from None


@register("gsm8k")
class GSM8K(DatasetAdapter):
    """GSM8K: the answer field is a worked solution ending in '#### <number>'."""

    scenario = "math"
    task_type = "reasoning"
    source = "openai/gsm8k (main)"
    license = "MIT"
    hub_id = "openai/gsm8k"
    hub_config = "main"
    required_fields = ("question", "answer")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        solution = str(require(row, "answer"))
        if "####" not in solution:
            raise BadRow("answer", "no '#### <number>' final answer")
        steps, final = solution.rsplit("####", 1)
        return self.instance(split, index, instruction=MATH_INSTRUCTION, question=str(require(row, "question")),
                             references=[_number(final, "answer")], meta={"solution": _CALC.sub("", steps).strip()})


@register("svamp")
class SVAMP(DatasetAdapter):
    """SVAMP: a body and a question (asked together), an equation and a numeric answer."""

    scenario = "math"
    task_type = "reasoning"
    source = "ChilleD/SVAMP"
    license = "MIT"
    hub_id = "ChilleD/SVAMP"
    required_fields = ("ID", "Body", "Question", "Answer")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        body = str(require(row, "Body")).strip()
        question = str(require(row, "Question")).strip()
        text = str(row.get("question_concat") or f"{body} {question}")
        return self.instance(split, row.get("ID") or index, instruction=MATH_INSTRUCTION, question=text.strip(),
                             references=[_number(require(row, "Answer"), "Answer")],
                             meta={"equation": str(row.get("Equation", "")), "type": str(row.get("Type", ""))})


@register("theoremqa")
class TheoremQA(DatasetAdapter):
    """TheoremQA: university-level STEM questions that each need a theorem; answers are numbers, booleans,
    lists or option letters (`Answer_type`). Questions that need a picture are left out by default (option
    `with_pictures`) since a text-only model cannot see them."""

    scenario = "science"
    task_type = "science"
    source = "TIGER-Lab/TheoremQA"
    license = "MIT"
    hub_id = "TIGER-Lab/TheoremQA"
    required_fields = ("Question", "Answer", "Answer_type")
    params: ClassVar[dict[str, Any]] = {"with_pictures": False}

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        if row.get("Picture") and not self.options["with_pictures"]:
            raise SkipRow("needs a picture")
        kind = str(require(row, "Answer_type"))
        answer = row.get("Answer")
        if answer is None or answer == "":
            raise BadRow("Answer")
        if kind in ("integer", "float"):
            ref = _number(answer, "Answer")
        elif kind == "bool":
            ref = str(answer).strip().capitalize()
            if ref not in ("True", "False"):
                raise BadRow("Answer", f"{answer!r} is not a boolean")
        else:
            ref = str(answer).strip()
        context = "\n".join(f"{label}: {row[key]}" for key, label in
                            (("theorem", "Theorem"), ("field", "Field"), ("subfield", "Subfield")) if row.get(key))
        return self.instance(
            split, row.get("id") or index,
            instruction=("Apply the relevant theorem and reason step by step. On the last line, write 'Answer:' "
                         f"followed by the final answer only ({kind.replace('_', ' ')})."),
            context=context, question=str(require(row, "Question")), references=[ref],
            meta={"answer_type": kind})
