"""Multiple-choice adapters: ARC-Challenge, CommonsenseQA, Belebele (multilingual reading MCQ).

Options are keyed by letter (numeric source labels become A, B, ...); r+ is the correct letter, r- the other
letters, and `meta['answer_text']` the correct option's text, so a judge can accept either.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from haldet.config import digest
from haldet.datasets.base import (
    BadRow,
    DatasetAdapter,
    Rows,
    Source,
    mcq_options,
    read_table,
    register,
    require,
)
from haldet.errors import HaldetError
from haldet.schema import Instance


def _choices(row: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    choices = require(row, "choices")
    if not isinstance(choices, dict) or "text" not in choices or "label" not in choices:
        raise BadRow("choices", "must be an object with 'text' and 'label' lists")
    return list(choices["label"]), list(choices["text"])


def _mcq_fields(options: dict[str, str], answer: str) -> dict[str, Any]:
    return {"options": options, "references": [answer],
            "incorrect": [letter for letter in options if letter != answer],
            "meta": {"answer_text": options[answer]}}


class _ChoicesMCQ(DatasetAdapter):
    """ARC and CommonsenseQA share a schema: `question`, `choices{text, label}`, `answerKey`."""

    scenario = "qa_mcq"
    task_type = "mcq"
    required_fields = ("id", "question", "choices", "answerKey")
    instruction = ""

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        labels, texts = _choices(row)
        options, to_letter = mcq_options(labels, texts, "choices")
        key = str(require(row, "answerKey")).strip()
        if key not in to_letter:
            raise BadRow("answerKey", f"{key!r} is not one of the choice labels {list(to_letter)}")
        fields = _mcq_fields(options, to_letter[key])
        if row.get("question_concept"):
            fields["meta"]["concept"] = row["question_concept"]
        return self.instance(split, row.get("id") or index, instruction=self.instruction,
                             question=str(require(row, "question")), **fields)


@register("arc_challenge")
class ARCChallenge(_ChoicesMCQ):
    source = "allenai/ai2_arc (ARC-Challenge)"
    license = "CC BY-SA 4.0"
    hub_id = "allenai/ai2_arc"
    hub_config = "ARC-Challenge"
    instruction = "Choose the option that best answers this grade-school science question."


@register("commonsenseqa")
class CommonsenseQA(_ChoicesMCQ):
    source = "tau/commonsense_qa"
    license = "MIT"
    hub_id = "tau/commonsense_qa"
    split_order = ("validation", "train")  # the public test split has no answer keys
    instruction = "Use everyday common sense to pick the option that fits the question best."


BELEBELE_LANGUAGES = ("eng_Latn", "fra_Latn", "deu_Latn", "spa_Latn", "zho_Hans", "arb_Arab", "hin_Deva",
                      "swh_Latn")


@register("belebele")
class Belebele(DatasetAdapter):
    """Belebele: FLORES passages with 4-way questions in 122 language variants; one hub config per language.

    `languages` (option) picks the variants, several by default. Local files: one `<lang>.jsonl` per
    language (the release's layout, also under `data/`), or one file whose `dialect` field is filtered.
    """

    scenario = "multilingual"
    task_type = "mcq"
    source = "facebook/belebele (one config per language)"
    license = "CC BY-SA 4.0"
    hub_id = "facebook/belebele"
    split_order = ("test",)
    required_fields = ("flores_passage", "question", "mc_answer1", "mc_answer2", "mc_answer3", "mc_answer4",
                       "correct_answer_num", "dialect")
    params: ClassVar[dict[str, Any]] = {"languages": BELEBELE_LANGUAGES}

    def languages(self) -> list[str]:
        langs = self.options["languages"]
        if isinstance(langs, str):
            langs = [s.strip() for s in langs.split(",") if s.strip()]
        if not langs:
            raise HaldetError("no Belebele language selected", where="dataset_params.belebele.languages",
                              hint="give codes such as eng_Latn, fra_Latn")
        return list(langs)

    def hub_configs(self) -> list[str | None]:
        return list(self.languages())

    def _language_files(self) -> list[Path]:
        assert self.data_dir is not None
        base = self.data_dir / self.name
        found: list[Path] = []
        for lang in self.languages():
            for cand in (base / f"{lang}.jsonl", base / "data" / f"{lang}.jsonl", base / f"{lang}.parquet"):
                if cand.is_file():
                    found.append(cand)
                    break
        return found

    def local_file(self) -> tuple[Path, str] | None:
        found = self._language_files()
        return (found[0], "test") if found else super().local_file()

    def local_rows(self) -> Source:
        found = self._language_files()
        parts: list[Sequence[dict[str, Any]]] = [read_table(path) for path in found]
        if parts:
            return Source(", ".join(map(str, found)), "test", Rows(parts))
        src = super().local_rows()  # one file with every language; keep the selected ones
        wanted = set(self.languages())
        rows = [r for r in src.rows if r.get("dialect") in wanted]
        if not rows:
            have = sorted({str(r.get("dialect")) for r in src.rows})[:20]
            raise HaldetError(f"no rows for languages {', '.join(sorted(wanted))}", where=src.origin,
                              hint=f"the file holds dialects {', '.join(have)}; set dataset_params.belebele"
                                   f".languages, or add <lang>.jsonl files")
        return Source(src.origin, src.split, rows)

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        texts = [require(row, f"mc_answer{i}") for i in range(1, 5)]
        options, _ = mcq_options(["1", "2", "3", "4"], texts, "mc_answer1..4")
        num = str(require(row, "correct_answer_num")).strip()
        if num not in ("1", "2", "3", "4"):
            raise BadRow("correct_answer_num", f"{num!r} is not 1-4")
        dialect = str(require(row, "dialect"))
        native = f"{dialect}-{digest(row.get('link', ''), 8)}-{row.get('question_number', index)}"
        fields = _mcq_fields(options, "ABCD"[int(num) - 1])
        fields["meta"]["language"] = dialect
        return self.instance(split, native,
                             instruction="Read the passage, then choose the option that answers the question.",
                             context=str(require(row, "flores_passage")), question=str(require(row, "question")),
                             **fields)
