"""Ground-truth answers of TRIVIA+'s source questions and the ROUGE overlap of each given answer with them.

The paper picked its candidate answers by ROUGE between the generated answer and the source dataset's ground-truth
answer (kept when below 0.1) and checks in Table 12 that detection is no easier in either ROUGE bin. The release
carries no ground-truth column, so the answers come from the user: a column of the release-format file
(`GOLD_COLUMNS`) or a file of question -> answer(s) (`read_gold_answers`), joined by normalised question text
(and by source where the file names one). Each item keeps its answers in `meta["gold_answers"]`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from haldet.datasets.formats import LINE, read_table
from haldet.datasets.rows import BadRow
from haldet.errors import HaldetError

GOLD_COLUMNS = ("gold_answers", "gold_answer", "ground_truth", "ground_truth_answer")  # in a release-format row
QUESTION_FIELDS = ("question", "query")
ANSWER_FIELDS = ("answers", "answer", "gold_answers", "gold_answer", "ground_truth")
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
# the paper's two bins (its filter kept ROUGE < 0.1) and the answers that filter would have dropped
ROUGE_BINS = ((0.0, 0.01, "[0, 0.01)"), (0.01, 0.1, "[0.01, 0.1)"), (0.1, 1.0, "[0.1, 1]"))
NO_ANSWER = "No Answer Present."  # MS MARCO's placeholder for a question without an answer


def normalise_question(text: str) -> str:
    """The join key of a question: Unicode-normalised, lower case, punctuation dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def answer_list(value: Any, field: str) -> list[str]:
    """A gold value as a list of non-empty answer strings: one string, a list of strings or a JSON list kept as
    text (csv); MS MARCO's "No Answer Present." placeholder is no answer. ValueError names what is wrong."""
    if hasattr(value, "tolist"):  # numpy arrays from a parquet reader
        value = value.tolist()
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{field} looks like a JSON list but does not parse: {value[:60]!r}") from None
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{field} must be an answer string or a list of strings, not {type(value).__name__}")
    return [v.strip() for v in values if v.strip() and v.strip() != NO_ANSWER]


def gold_of_row(row: Mapping[str, Any]) -> list[str] | None:
    """The answers in a release-format row's own gold column (None when it has none or it is empty); BadRow
    naming the column when its value is no answer string or list."""
    for column in GOLD_COLUMNS:
        if row.get(column) is not None:
            try:
                return answer_list(row[column], column) or None
            except ValueError as exc:
                raise BadRow(column, str(exc).removeprefix(f"{column} ")) from None
    return None


class GoldAnswers:
    """Question -> answers read from a user's file (jsonl / json / csv / parquet): a question field (`question` or
    `query`), an answer field (`answers`, `answer`, `gold_answers`, `gold_answer` or `ground_truth`: a string or a
    list) and optionally `source` (the release's source name, e.g. `trivia`, `nq`), used first when present."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        where = "dataset_params.triviaplus.gold_answers"
        hint = ("give a jsonl/json/csv/parquet file with one row per question: `question` and `answer` (a string or "
                "a list of strings), optionally `source` (docs/suites.md, TRIVIA+, Table 12)")
        if not self.path.is_file():
            raise HaldetError(f"gold-answers file not found: {self.path}", where=where, hint=hint)
        try:
            rows = read_table(self.path)
        except HaldetError as exc:
            raise HaldetError(f"cannot read the gold-answers file: {exc.what}", where=exc.where or str(self.path),
                              hint=hint) from None
        self.by_question: dict[str, list[str]] = {}
        self.by_source: dict[tuple[str, str], list[str]] = {}
        for k, row in enumerate(rows):
            line = f"{self.path}, line {row.get(LINE) or k + 1}"
            qfield = next((f for f in QUESTION_FIELDS if row.get(f) not in (None, "")), None)
            afield = next((f for f in ANSWER_FIELDS if row.get(f) is not None), None)
            if qfield is None or afield is None:
                missing = "a question field (question or query)" if qfield is None else \
                    f"an answer field ({', '.join(ANSWER_FIELDS)})"
                raise HaldetError(f"gold-answers row without {missing}", where=line, hint=hint)
            try:
                answers = answer_list(row[afield], afield)
            except ValueError as exc:
                raise HaldetError(f"gold-answers row: {exc}", where=line, hint=hint) from None
            if not answers:
                raise HaldetError(f"gold-answers row with an empty {afield}", where=line,
                                  hint="leave questions without an answer out of the file")
            key = normalise_question(str(row[qfield]))
            _merge(self.by_question, key, answers)
            if row.get("source") not in (None, ""):
                _merge(self.by_source, (str(row["source"]).strip().lower(), key), answers)
        if not self.by_question:
            raise HaldetError("the gold-answers file holds no rows", where=str(self.path), hint=hint)

    def lookup(self, question: str, source: str | None = None) -> list[str] | None:
        """The answers of a question (those given for its source first), None when the file has none."""
        key = normalise_question(question)
        if source is not None and (key_s := (source.strip().lower(), key)) in self.by_source:
            return self.by_source[key_s]
        return self.by_question.get(key)


def _merge(into: dict[Any, list[str]], key: Any, answers: Sequence[str]) -> None:
    into[key] = list(dict.fromkeys([*into.get(key, []), *answers]))


class Rouge:
    """ROUGE F-measure of an answer against its best-matching ground-truth answer (rouge-score, Porter stemming,
    as the project's other ROUGE uses)."""

    def __init__(self, rouge_type: str = "rougeL") -> None:
        if rouge_type not in ROUGE_TYPES:
            raise HaldetError(f"unknown ROUGE type {rouge_type!r}", where="suite_params.triviaplus.rouge_type",
                              hint=f"one of {', '.join(ROUGE_TYPES)}")
        from rouge_score import rouge_scorer

        self.rouge_type = rouge_type
        self._scorer = rouge_scorer.RougeScorer([rouge_type], use_stemmer=True)

    def score(self, answer: str, golds: Sequence[str]) -> float:
        """max over `golds` of the F-measure of `answer` against that ground truth."""
        return max(self._scorer.score(gold, answer)[self.rouge_type].fmeasure for gold in golds)


def rouge_bin(score: float) -> str:
    """The Table 12 bin of a ROUGE score: [0, 0.01), [0.01, 0.1) (the paper's) or [0.1, 1]."""
    for low, high, name in ROUGE_BINS:
        if low <= score < high:
            return name
    if score == ROUGE_BINS[-1][1]:
        return ROUGE_BINS[-1][2]
    raise ValueError(f"ROUGE score {score!r} outside [0, 1]")
