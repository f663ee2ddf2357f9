"""Multiple-choice adapters: ARC-Challenge, CommonsenseQA, Belebele (multilingual reading MCQ).

Options are keyed by letter (numeric source labels become A, B, ...); r+ is the correct letter, r- the other
letters, and `meta['answer_text']` the correct option's text, so a judge can accept either.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from haldet.config import digest
from haldet.datasets.adapter import DatasetAdapter, Source
from haldet.datasets.base import register
from haldet.datasets.formats import Format, RawFile, records, with_line
from haldet.datasets.rows import BadRow, mcq_options, require
from haldet.errors import HaldetError
from haldet.schema import Instance


def _stem_release(raw: RawFile) -> list[tuple[str | None, list[dict[str, Any]]]] | None:
    """The AI2 release layout shared by ARC (`ARC-Challenge-Dev.jsonl`) and CommonsenseQA (`dev_rand_split.jsonl`):
    {"id", "question": {"stem", "choices": [{"label", "text"}], "question_concept"?}, "answerKey"}."""
    recs = records(raw)
    if recs is None or not recs or not all(isinstance(r.get("question"), dict) and "stem" in r["question"]
                                           for r, _ in recs):
        return None
    rows = []
    for r, line in recs:
        q = r["question"]
        choices = [c for c in q.get("choices") or [] if isinstance(c, dict)]
        row = with_line(r, line, id=r.get("id"), question=q.get("stem"),
                        choices={"label": [c.get("label") for c in choices], "text": [c.get("text") for c in choices]},
                        answerKey=r.get("answerKey"))
        if "question_concept" in q:
            row["question_concept"] = q["question_concept"]
        rows.append(row)
    return [(None, rows)]


AI2_RELEASE = "{id, question: {stem, choices: [{label, text}]}, answerKey}"


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
    originals = (Format("ARC release", f"ARC-Challenge-Dev/Test/Train.jsonl: {AI2_RELEASE}", _stem_release),)
    instruction = "Choose the option that best answers this grade-school science question."


@register("commonsenseqa")
class CommonsenseQA(_ChoicesMCQ):
    source = "tau/commonsense_qa"
    license = "MIT"
    hub_id = "tau/commonsense_qa"
    split_order = ("validation", "train")  # the public test split has no answer keys
    originals = (Format("CommonsenseQA release", f"train/dev_rand_split.jsonl: {AI2_RELEASE} (+ question_concept)",
                        _stem_release),)
    instruction = "Use everyday common sense to pick the option that fits the question best."


_LANG_FILE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")  # FLORES-200 code: eng_Latn, zho_Hans
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
    file_split = "test"
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

    def local_paths(self) -> list[Path]:
        """Every file of the folder, except per-language files (`<lang>.jsonl`, the release's layout) of
        languages not selected."""
        wanted = set(self.languages())
        return [p for p in super().local_paths()
                if not (_LANG_FILE.fullmatch(p.name.split(".")[0]) and p.name.split(".")[0] not in wanted)]

    def local_rows(self) -> Source:
        src = super().local_rows()  # per-language files, or one file with every language: keep the selected ones
        wanted = set(self.languages())
        rows = [r for r in src.rows if r.get("dialect") in wanted]
        if not rows:
            have = sorted({str(r.get("dialect")) for r in src.rows})[:20]
            raise HaldetError(f"no rows for languages {', '.join(sorted(wanted))}", where=src.origin,
                              hint=f"the files hold dialects {', '.join(have)}; set dataset_params.belebele"
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
