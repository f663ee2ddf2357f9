"""VeriGray data: label vocabulary (order, aliases, Ambiguous readings, unknown labels), the adapter on a fixture
in the source's schema, and the seeded document-grouped split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.evaluation.splits import grouped_split
from haldet.suites.verigray.labels import (
    AMBIGUOUS,
    CLASSES,
    CONTRADICTING,
    EXPLICIT,
    IMPLICIT,
    UnknownLabel,
    grade_of,
    parse_annotation,
)
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"


def test_classes_are_ordered_by_faithfulness_and_aliases_map() -> None:
    assert [grade_of(c) for c in CLASSES] == list(range(7))
    assert grade_of("Inconsistent") == CONTRADICTING and grade_of("Generally-Supported") == IMPLICIT
    assert grade_of("explicitly supported") == EXPLICIT and grade_of("NO_FACT") == 3
    for bad in ("Supported", "Hallucinated", "", "Ambigous"):
        with pytest.raises(UnknownLabel):
            grade_of(bad)


def test_ambiguous_readings_are_kept_not_mapped() -> None:
    ann = parse_annotation("Contradicting / Explicitly-Supported")
    assert ann.grade == AMBIGUOUS and ann.readings == (CONTRADICTING, EXPLICIT) and ann.binary is None
    assert parse_annotation("Ambiguous").readings == ()
    assert parse_annotation("Fabricated").binary == 1 and parse_annotation("Generally-Supported").binary == 0
    assert parse_annotation("Out-Dependent").binary is None
    with pytest.raises(UnknownLabel):
        parse_annotation("Fabricated / Made-Up")


def test_adapter_maps_fixture_rows_to_sentence_units() -> None:
    items, report = get_adapter("verigray", data_dir=FIX).load()
    assert report.n_rows == 10 and len(items) == 10
    rows = [json.loads(line) for line in (FIX / "verigray" / "test.jsonl").read_text().splitlines()]
    by_answer = {r["answer"]: r for r in rows}
    grades = []
    for inst in items:
        row = by_answer[inst.response]
        assert inst.context == row["question"] and inst.meta["generator"] == row["generator"]
        units = inst.units_of("sentence")
        assert [u.text for u in units] == [s["text"] for s in row["sentences"]]
        for unit, sent in zip(units, row["sentences"], strict=True):
            assert inst.response[unit.start:unit.end] == unit.text
            assert unit.grade_name == CLASSES[grade_of(sent["annotation"].split("/")[0])] or unit.meta["readings"]
            assert unit.binary == parse_annotation(sent["annotation"]).binary  # protocol 1's label or None
        grades += [u.grade for u in units]
    assert sorted(set(grades)) == list(range(7))
    assert [u.grade for u in items[0].units] == [6 - parse_annotation(s["annotation"]).grade
                                                 for s in by_answer[items[0].response]["sentences"]]
    amb = [u for i in items for u in i.units if u.meta["readings"]]
    assert len(amb) == 1 and amb[0].grade_name == "Ambiguous" and amb[0].grade == 6 - AMBIGUOUS
    assert amb[0].meta["readings"] == ["Contradicting", "Explicitly-Supported"] and amb[0].binary is None
    # scoring views never see the grades
    assert all(u.grade is None and u.binary is None for u in items[0].without_labels().units)


def test_unknown_label_is_an_error_naming_the_row(tmp_path: Path) -> None:
    row = {"question": "The sky was blue on Monday.", "answer": "The sky was blue.", "generator": "m",
           "sentences": [{"text": "The sky was blue.", "range": [0, 17], "annotation": "Mostly-True",
                          "rationale": ""}]}
    (tmp_path / "verigray").mkdir()
    (tmp_path / "verigray" / "test.jsonl").write_text(json.dumps(row) + "\n")
    for policy in ("fail", "skip"):  # never skipped into a default class
        with pytest.raises(HaldetError, match=r"line 1 .*sentences\[0\]\.annotation.*Mostly-True"):
            get_adapter("verigray", data_dir=tmp_path).load(on_bad_row=policy)


def test_wrong_range_is_realigned_and_missing_text_is_a_bad_row(tmp_path: Path) -> None:
    row = {"question": "Doc.", "answer": "One fact. Two facts.", "generator": "m",
           "sentences": [{"text": "One fact.", "range": [0, 9], "annotation": "Fabricated"},
                         {"text": "Two facts.", "range": [3, 7], "annotation": "Fabricated"}]}
    (tmp_path / "verigray").mkdir()
    path = tmp_path / "verigray" / "test.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (inst,), _ = get_adapter("verigray", data_dir=tmp_path).load()
    assert inst.meta["realigned"] == 1 and inst.units[1].start == 10
    row["sentences"][1]["text"] = "Three facts."
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(HaldetError, match=r"line 1 .*sentences\[1\]\.range"):
        get_adapter("verigray", data_dir=tmp_path).load()


def test_grouped_split_keeps_each_document_in_one_part() -> None:
    items, _ = get_adapter("verigray", data_dir=FIX).load()
    groups = {i.id: i.meta["document_id"] for i in items}
    split = grouped_split(groups, seed=42)
    assert sorted(i for ids in split.values() for i in ids) == sorted(groups)
    part_of = {i: name for name, ids in split.items() for i in ids}
    for doc in set(groups.values()):
        assert len({part_of[i] for i, d in groups.items() if d == doc}) == 1
    assert [len({groups[i] for i in split[p]}) for p in ("train", "val", "test")] == [4, 1, 1]  # 6 documents
    assert grouped_split(groups, seed=42) == split and grouped_split(groups, seed=7) != split
