"""TRIVIA+ from its release file: one parquet (`Triviaplus_all_withnoise_cleaned_<date>.parquet`) with every split.

The licence forbids redistribution, so haldet never ships or downloads it: pass `--data-dir DIR` holding the file
(`DIR/triviaplus/<any>.parquet`, `DIR/<any>.parquet` or the file itself). A jsonl/json/csv file with the same
columns (list columns as JSON) loads too, which is what the tests' fixtures use besides parquet.

Each row is one labelled answer: `article` (context), `question`, `answer` (the provided response, written by
`model`), the answer's sentences (`answer_sentence_list`) with their majority-vote labels
(`sentence_level_majority_vote`: supports / supplementary = faithful, contradicts / not-mentioned = unfaithful),
the clean response label (`response_level_label_binary`, 1 = unfaithful), the 3-way label
(`response_level_label`: -1 not mentioned, 0 faithful, 1 contradicted) and the four noisy binary columns.
The release's `split` column (train / valid / test) is kept: the suite never re-splits.

The release has no ground-truth answer of the source question (Table 12 bins answers by ROUGE against it): an
optional `gold_answers` / `gold_answer` / `ground_truth` column, or `dataset_params.triviaplus.gold_answers: PATH`
(a file of question -> answers, `gold.GoldAnswers`), lands in `meta["gold_answers"]` with its origin in
`meta["gold_origin"]`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter, Source
from haldet.datasets.base import register
from haldet.datasets.rows import BadRow, require
from haldet.errors import HaldetError
from haldet.schema import Category, Instance, SpanLabel
from haldet.suites.triviaplus.gold import GoldAnswers, gold_of_row
from haldet.suites.triviaplus.protocol import CLEAN, REGIME_COLUMNS, domain_of

SPLITS = {"train": "train", "valid": "val", "validation": "val", "val": "val", "dev": "val", "test": "test"}
SENTENCE_LABELS = {"supports": 0, "supplementary": 0, "contradicts": 1, "not-mentioned": 1}
RESPONSE_3WAY = {-1: "not-mentioned", 0: "faithful", 1: "contradicted"}
REQUIRED = ("source", "split", "model", "article", "question", "answer", "answer_sentence_list",
            "sentence_level_majority_vote", "response_level_label_binary")


def interleaved_order(parts: Sequence[str], seed: int) -> list[tuple[int, int | None]]:
    """Row indices in an order whose every prefix holds each part (`parts[i]` is row i's split) in its
    proportion: a seeded shuffle within each part, then interleaved by relative rank."""
    by_part: dict[str, list[int]] = {}
    for i, part in enumerate(parts):
        by_part.setdefault(part, []).append(i)
    rng = random.Random(seed)
    ranked = []
    for part in sorted(by_part):
        idx = by_part[part]
        rng.shuffle(idx)
        ranked += [((k + 0.5) / len(idx), part, i) for k, i in enumerate(idx)]
    return [(i, None) for _, _, i in sorted(ranked)]


def _binary(row: dict[str, Any], column: str) -> int:
    value: Any = row.get(column)  # a table cell of any type; int() refuses the wrong ones
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise BadRow(column, f"must be 0 or 1, not {value!r}") from None
    if out not in (0, 1) or (isinstance(value, float) and value != out):
        raise BadRow(column, f"must be 0 or 1, not {value!r}")
    return out


def _string_list(row: dict[str, Any], column: str) -> list[str]:
    value = row.get(column)
    if isinstance(value, str):  # a JSON list kept as text (csv)
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise BadRow(column, "must be a list of strings") from None
    if value is not None and hasattr(value, "tolist"):  # numpy arrays from a parquet reader
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRow(column, "must be a list of strings")
    return value


_SPACE = re.compile(r"\s+")


def locate_sentences(answer: str, sentences: Sequence[str]) -> list[tuple[int, int] | None]:
    """Character offsets of each sentence in the answer, searched in order from the end of the previous one
    (exact text first, then with any run of whitespace matching any other); None for a sentence not found."""
    out: list[tuple[int, int] | None] = []
    pos = 0
    for sent in sentences:
        text = sent.strip()
        start = answer.find(text, pos) if text else -1
        if start >= 0:
            span: tuple[int, int] | None = (start, start + len(text))
        else:
            pattern = r"\s+".join(re.escape(w) for w in _SPACE.split(text) if w)
            match = re.compile(pattern).search(answer, pos) if pattern else None
            span = (match.start(), match.end()) if match else None
        out.append(span)
        if span is not None:
            pos = span[1]
    return out


@register("triviaplus")
class TriviaPlus(DatasetAdapter):
    scenario = "rag"
    task_type = "rag"
    source = "TRIVIA+ release parquet (github.com/Wenbo11/TriviaPlus; not redistributable, bring your own copy)"
    license = "see the TRIVIA+ release (no redistribution)"
    required_fields = REQUIRED
    params: ClassVar[dict[str, Any]] = {"gold_answers": None}  # a question -> ground-truth answers file

    split_order = ("all",)  # one file holds every split; `Instance.split` keeps each row's own
    file_split = "all"

    def __init__(self, data_dir: Any = None, **options: Any) -> None:
        super().__init__(data_dir, **options)
        path = self.options.get("gold_answers")
        self.gold_file = GoldAnswers(path) if path else None  # read (and checked) once, before any row

    # --- where the rows come from -----------------------------------------------------------------------
    def hub_rows(self) -> Source:
        raise HaldetError("TRIVIA+ is not on any hub haldet may download from (its licence forbids redistribution)",
                          where="dataset triviaplus",
                          hint="download the release parquet yourself and pass --data-dir DIR (file in "
                               "DIR/triviaplus/) or --data-file PATH")

    def _split_preference(self) -> tuple[str, ...]:
        return self.split_order

    def local_rows(self) -> Source:
        """Every row of the release file; `--split NAME` (train, valid/val, test) keeps that release split."""
        src = super().local_rows()
        wanted = self.options.get("split")
        if not wanted:
            return src
        want = SPLITS.get(str(wanted))
        if want is None:
            raise HaldetError(f"TRIVIA+ has no split {wanted!r}", where="--split", hint="train, valid or test")
        rows = [r for r in src.rows if SPLITS.get(str(r.get("split")), "") == want]
        return Source(src.origin, str(wanted), rows)

    def ordered_units(self, rows: Sequence[dict[str, Any]], seed: int) -> list[tuple[int, int | None]]:
        """Rows in an order whose every prefix holds the three release splits in their proportions, so
        `--limit N` keeps train, valid and test items."""
        return interleaved_order([str(row.get("split")) for row in rows], seed)

    # --- one row -> one instance ---------------------------------------------------------------------
    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        raw_split = str(require(row, "split"))
        if raw_split not in SPLITS:
            raise BadRow("split", f"{raw_split!r} is not one of train, valid, test")
        article, question = str(require(row, "article")), str(require(row, "question"))
        answer = str(require(row, "answer"))
        sentences = _string_list(row, "answer_sentence_list")
        votes = _string_list(row, "sentence_level_majority_vote")
        if len(votes) != len(sentences):
            raise BadRow("sentence_level_majority_vote", f"{len(votes)} labels for {len(sentences)} sentences")
        unknown = sorted({v for v in votes if v not in SENTENCE_LABELS})
        if unknown:
            raise BadRow("sentence_level_majority_vote",
                         f"unknown label(s) {', '.join(map(repr, unknown))} (known: {', '.join(SENTENCE_LABELS)})")
        labels = {regime: _binary(row, column) for regime, column in REGIME_COLUMNS.items()
                  if regime == CLEAN or row.get(column) is not None}
        three_way = row.get("response_level_label")
        three = _int_or_none(three_way)
        if three_way is not None and (three is None or three not in RESPONSE_3WAY):
            raise BadRow("response_level_label", f"must be -1, 0 or 1, not {three_way!r}")
        worker_votes = _worker_votes(row)
        spans = locate_sentences(answer, sentences)
        units = [SpanLabel(kind="sentence", start=sp[0], end=sp[1], text=answer[sp[0]:sp[1]],
                           category=_category(SENTENCE_LABELS[v]), meta={"vote": v})
                 for sp, v in zip(spans, votes, strict=True) if sp is not None]
        meta = {"generator": str(require(row, "model")), "source_name": str(require(row, "source")),
                "domain": domain_of(str(row["source"])), "context_chars": len(article),
                "label_3way": RESPONSE_3WAY[three] if three is not None else None,
                "sentences_unaligned": [s for s, sp in zip(sentences, spans, strict=True) if sp is None]}
        if worker_votes is not None:
            meta["worker_votes"] = worker_votes
        meta.update(self._gold(row, question))
        return self.instance(SPLITS[raw_split], index, context=article, question=question, response=answer,
                             units=units, response_label=_category(labels[CLEAN]), split=SPLITS[raw_split],
                             label_variants={r: _category(v) for r, v in labels.items() if r != CLEAN}, meta=meta)


    def _gold(self, row: dict[str, Any], question: str) -> dict[str, Any]:
        """`gold_answers` and `gold_origin` of the row: its own gold column first, then the gold-answers file."""
        own = gold_of_row(row)
        if own:
            return {"gold_answers": own, "gold_origin": "column"}
        if self.gold_file is None:
            return {}
        found = self.gold_file.lookup(question, str(row.get("source") or ""))
        return {"gold_answers": found, "gold_origin": str(self.gold_file.path)} if found else {}


def _worker_votes(row: dict[str, Any]) -> list[list[Any]] | None:
    """[[worker, 0/1], ...] from the raw annotation columns `workerId` and `response-level-labels-bin` (None when the
    file has no such columns)."""
    if row.get("workerId") is None and row.get("response-level-labels-bin") is None:
        return None
    workers = _string_list(row, "workerId")
    raw: Any = row.get("response-level-labels-bin")
    raw = raw.tolist() if hasattr(raw, "tolist") else raw
    if not isinstance(raw, list) or len(raw) != len(workers) or any(str(v) not in ("0", "1") for v in raw):
        raise BadRow("response-level-labels-bin", f"must hold one vote '0' or '1' per worker ({len(workers)})")
    return [[w, int(str(v))] for w, v in zip(workers, raw, strict=True)]


def _category(label: int) -> Category:
    return Category.HALLUCINATION if label == 1 else Category.CORRECT


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None

