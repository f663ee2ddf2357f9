"""Dolly (NC): RefChecker's noisy-context benchmark (Hu et al., 2024) as given responses, from its release files.

RefChecker publishes, per answering model, `benchmark/human_annotations_v1/noisy_context/msmarco_<model>_answers.json`
(a JSON list of `{id, response, <extractor>_response_kg: [{triplet: [subject, predicate, object], human_label}]}`,
`human_label` one of Entailment, Neutral, Contradiction), and builds the questions with their retrieved MS MARCO
passages into `benchmark/data/noisy_context/msmarco.json` (a JSON list of `{id, question, context: [passages],
...}`) with its own `gather_benchmark_data.py`. Put those files (any names) in `DIR/dolly_nc/`; the answer files'
model comes from their `msmarco_<model>_answers` names.

One item per (question, model) answer. A response is a hallucination when any of its claim triplets is labelled
Neutral (not in the passages) or Contradiction (the strictest-claim rule the TRIVIA+ paper applies everywhere);
an answer without claims (RefChecker's abstentions) is faithful. MS MARCO's own answers of the question
(`wellFormedAnswers`, `answers`), when msmarco.json carries them, are the item's `meta["gold_answers"]` (Table 12).
The release has no split: items are cut 60/20/20
into train / validation / test by question (seeded), so one question's answers never cross parts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from haldet.datasets.adapter import DatasetAdapter, Source
from haldet.datasets.base import register
from haldet.datasets.formats import LINE, read_raw, read_table
from haldet.datasets.rows import BadRow, require
from haldet.errors import HaldetError
from haldet.evaluation.splits import grouped_split
from haldet.schema import Category, Instance
from haldet.suites.triviaplus.dataset import interleaved_order
from haldet.suites.triviaplus.gold import answer_list

CLAIM_LABELS = {"Entailment": "faithful", "Neutral": "not-mentioned", "Contradiction": "contradicted"}
INSTRUCTION = "Answer the question using only the passages in the context."
_ANSWERS = re.compile(r"^(?:msmarco_)?(?P<model>.+?)_answers$")


def claims_of(row: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The row's claim list and the field holding it (`claude2_response_kg` in the release; any
    `*_response_kg` field is accepted)."""
    fields = [k for k in row if k.endswith("_response_kg")]
    if len(fields) != 1:
        raise BadRow("*_response_kg", "each answer needs exactly one claim-triplet list (e.g. claude2_response_kg)")
    claims = row[fields[0]]
    if not isinstance(claims, list):
        raise BadRow(fields[0], "must be a list of {triplet, human_label}")
    return fields[0], claims


@register("dolly_nc")
class DollyNC(DatasetAdapter):
    scenario = "rag"
    task_type = "rag"
    source = ("RefChecker benchmark, noisy context (github.com/amazon-science/RefChecker, benchmark/): "
              "msmarco.json + human_annotations_v1/noisy_context/msmarco_<model>_answers.json")
    license = "CC BY-NC 4.0 (RefChecker benchmark annotations); MS MARCO terms for the passages"
    required_fields = ("msmarco.json: id", "msmarco.json: question", "msmarco.json: context",
                       "msmarco_<model>_answers.json: id", "msmarco_<model>_answers.json: response",
                       "msmarco_<model>_answers.json: <extractor>_response_kg")
    split_order = ("all",)
    params: ClassVar[dict[str, Any]] = {}

    def hub_rows(self) -> Source:
        raise HaldetError("Dolly (NC) is not on a hub haldet reads from", where="dataset dolly_nc",
                          hint="build benchmark/data/noisy_context/msmarco.json with RefChecker's "
                               "benchmark/data/download_data.sh, copy it and the human_annotations_v1/noisy_context/"
                               "msmarco_<model>_answers.json files into DIR/dolly_nc/ and pass --data-dir DIR")

    def offline_available(self) -> bool:
        return self.data_dir is not None and bool(self.local_paths())

    def local_file(self) -> tuple[Path, str] | None:
        paths = self.local_paths()
        return (paths[0], "all") if paths else None

    def local_rows(self) -> Source:
        """Questions (rows with `question` and `context`) joined with every model's answers (rows with `response`
        and a `*_response_kg` list) on `id`."""
        paths = self.local_paths()
        if self.data_dir is not None and self.data_dir.is_file():
            paths += [p for p in sorted(self.data_dir.parent.iterdir()) if p.is_file() and p != self.data_dir]
        questions: dict[str, dict[str, Any]] = {}
        answers: list[tuple[Path, list[dict[str, Any]]]] = []
        for path in paths:
            try:
                cols = set(read_raw(path).columns())
            except HaldetError:
                continue  # a README or licence beside the data
            if {"id", "question", "context"} <= cols:
                for row in read_table(path):
                    questions[str(row.get("id"))] = row
            elif {"id", "response"} <= cols and any(c.endswith("_response_kg") for c in cols):
                answers.append((path, read_table(path)))
        folder = self._local_folder()
        if not questions:
            raise HaldetError("Dolly (NC) questions file (msmarco.json) not found", where=folder,
                              hint="build it with RefChecker's benchmark/data/download_data.sh (fields id, question, "
                                   "context) and put it beside the answer files")
        if not answers:
            raise HaldetError("no Dolly (NC) answer file (msmarco_<model>_answers.json) found", where=folder,
                              hint="copy RefChecker's benchmark/human_annotations_v1/noisy_context/*.json there")
        rows = []
        for path, part in answers:
            match = _ANSWERS.match(path.name.split(".")[0])
            model = match.group("model") if match else path.stem
            for row in part:
                q = questions.get(str(row.get("id")))
                if q is None:
                    raise HaldetError(f"answer id {row.get('id')!r} has no question in the questions file",
                                      where=f"{path}, line {row.get(LINE, '?')}",
                                      hint="use the msmarco.json built from the same RefChecker release")
                gold = {k: q[k] for k in ("wellFormedAnswers", "answers") if q.get(k) is not None}
                rows.append({**row, "model": model, "question": q["question"], "context": q["context"], **gold,
                             "_file": path.name})
        return Source(f"{folder} ({len(answers)} answer files)", "all", rows)

    def ordered_units(self, rows: Sequence[dict[str, Any]], seed: int) -> list[tuple[int, int | None]]:
        """A seeded 60/20/20 split by question, then an order whose every prefix holds all three parts."""
        split = grouped_split({str(k): str(r.get("id")) for k, r in enumerate(rows)}, seed=seed)
        part_of = {int(k): part for part, ids in split.items() for k in ids}
        self._parts = [part_of[k] for k in range(len(rows))]
        return interleaved_order(self._parts, seed)

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        field, claims = claims_of(row)
        kinds = []
        for claim in claims:
            label = claim.get("human_label") if isinstance(claim, dict) else None
            if label not in CLAIM_LABELS:
                raise BadRow(field, f"human_label {label!r} is not one of {', '.join(CLAIM_LABELS)}")
            kinds.append(CLAIM_LABELS[label])
        context = require(row, "context")
        passages = context if isinstance(context, list) else [context]
        text = "\n\n".join(f"passage {k + 1}: {p}" for k, p in enumerate(passages))
        three = ("contradicted" if "contradicted" in kinds else "not-mentioned" if "not-mentioned" in kinds
                 else "faithful")
        part = self._parts[index]
        model = str(row["model"])
        gold = _gold(row)
        return self.instance(part, f"{require(row, 'id')}.{model}", instruction=INSTRUCTION, context=text,
                             question=str(require(row, "question")), response=str(require(row, "response")),
                             response_label=Category.CORRECT if three == "faithful" else Category.HALLUCINATION,
                             split=part,
                             meta={"generator": model, "domain": "MS-MARCO", "source_name": "msmarco",
                                   "context_chars": len(text), "label_3way": three, "question_id": str(row["id"]),
                                   "claims": [{"triplet": c.get("triplet"), "label": c.get("human_label")}
                                              for c in claims], **gold})


def _gold(row: dict[str, Any]) -> dict[str, Any]:
    """MS MARCO's own answers of the question, carried into msmarco.json (its well-formed rewrites first, then the
    extracted answers; "No Answer Present." is none), as `gold_answers` for Table 12; {} when it has none."""
    for field in ("wellFormedAnswers", "answers"):
        if row.get(field) is not None:
            try:
                found = answer_list(row[field], field)
            except ValueError as exc:
                raise BadRow(field, str(exc).removeprefix(f"{field} ")) from None
            if found:
                return {"gold_answers": found, "gold_origin": f"msmarco.json {field}"}
    return {}
