"""TRIVIA+'s companion datasets as given responses: RAGTruth-QA and Dolly (NC), read from their release schemas."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.schema import Category

DATA = Path(__file__).parent / "fixtures" / "datasets"


def test_ragtruth_qa_one_item_per_qa_response_with_its_spans_and_the_release_split() -> None:
    items, report = get_adapter("ragtruth_qa", DATA, None).load(limit=None)
    responses = [json.loads(line) for line in (DATA / "ragtruth_qa" / "response.jsonl").open()]
    # 16 responses: one Summary (not QA) and one incorrect_refusal (RAGTruth's baseline drops it) are left out
    assert len(items) == 14 and report.n_filtered == 1
    by_native = {i.id.rsplit("/", 1)[1]: i for i in items}
    for r in responses:
        inst = by_native.get(r["id"])
        if inst is None:
            assert r["quality"] != "good" or r["source_id"] == "401"
            continue
        assert inst.response == r["response"] and inst.meta["generator"] == r["model"]
        assert [(u.start, u.end, u.text) for u in inst.units] == [(s["start"], s["end"], s["text"])
                                                                  for s in r["labels"]]
        assert (inst.response_label == Category.HALLUCINATION) == bool(r["labels"])
        # the release's test split is the test part; its train split gives train and validation
        assert (inst.split == "test") == (r["split"] == "test")
    # validation = 20% of the 5 train sources (one source: both its responses), never split across parts
    parts = {(i.meta["source_id"], i.split) for i in items}
    assert len({s for s, _ in parts}) == len(parts)
    assert Counter(i.split for i in items) == {"train": 8, "val": 2, "test": 4}
    # conflict beats baseless info in the 3-way label (source 302's response has both)
    both = next(i for i in items if len(i.units) == 2)
    assert both.meta["label_3way"] == "contradicted"
    assert {i.meta["label_3way"] for i in items} == {"faithful", "contradicted", "not-mentioned"}


def test_ragtruth_qa_refuses_an_unknown_span_type(tmp_path: Path) -> None:
    folder = tmp_path / "ragtruth_qa"
    shutil.copytree(DATA / "ragtruth_qa", folder)
    lines = (folder / "response.jsonl").read_text().splitlines()
    row = json.loads(lines[1])
    row["labels"][0]["label_type"] = "Made Up"
    lines[1] = json.dumps(row)
    (folder / "response.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(HaldetError, match="Made Up"):
        get_adapter("ragtruth_qa", tmp_path, None).load(limit=None)


def test_dolly_nc_joins_questions_and_answers_and_applies_the_strictest_claim_rule() -> None:
    items, _ = get_adapter("dolly_nc", DATA, None).load(limit=None)
    assert len(items) == 10 and {i.meta["generator"] for i in items} == {"gpt4", "alpaca_7B"}
    by_id = {i.id.rsplit("/", 1)[1]: i for i in items}
    # alpaca's answers: Neutral -> not mentioned; any Contradiction -> contradicted; all Entailment -> faithful
    assert by_id["1001.alpaca_7B"].meta["label_3way"] == "not-mentioned"
    assert by_id["1003.alpaca_7B"].meta["label_3way"] == "contradicted"
    assert by_id["1004.alpaca_7B"].response_label == Category.CORRECT
    assert by_id["1004.gpt4"].response_label == Category.CORRECT  # no claims: an abstention
    assert sum(i.response_label == Category.HALLUCINATION for i in items) == 4
    assert by_id["1002.gpt4"].context.startswith("passage 1: The Eiffel Tower is 330 metres")
    # one question's answers never cross parts; every part is present
    assert all(len({i.split for i in items if i.meta["question_id"] == q}) == 1
               for q in {i.meta["question_id"] for i in items})
    assert {i.split for i in items} == {"train", "val", "test"}


def test_dolly_nc_without_its_questions_file_says_which_file_is_missing(tmp_path: Path) -> None:
    folder = tmp_path / "dolly_nc"
    folder.mkdir()
    shutil.copy(DATA / "dolly_nc" / "msmarco_gpt4_answers.json", folder)
    with pytest.raises(HaldetError, match=r"msmarco\.json"):
        get_adapter("dolly_nc", tmp_path, None).load(limit=None)
