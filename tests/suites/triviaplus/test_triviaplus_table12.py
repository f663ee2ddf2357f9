"""TRIVIA+ Table 12: ground-truth answers (release column, a user's file, the companions' own), ROUGE, the bins,
AUROC per bin and its spread, and the stand-in line when no item has a ground truth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import triviaplus_rows
from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.schema import Category, Instance
from haldet.suites.base import DATA, get_suite
from haldet.suites.report import suite_markdown
from haldet.suites.triviaplus.analysis import DetectorScores, RougeBins, auroc_spread, rouge_bin_rows, rouge_binned
from haldet.suites.triviaplus.gold import Rouge, normalise_question, rouge_bin
from haldet.suites.triviaplus.suite import rouge_table
from repo_paths import FIXTURES

DATA_DIR = FIXTURES / "datasets"


def _item(k: int, label: int, response: str = "an answer", gold: list[str] | None = None) -> Instance:
    return Instance(id=f"triviaplus/test/{k}", dataset="triviaplus", scenario="rag", task_type="rag", question="q?",
                    response=response, split="test", meta={"gold_answers": gold} if gold else {},
                    response_label=Category.HALLUCINATION if label else Category.CORRECT)


def test_rouge_l_of_a_hand_worked_pair_and_the_best_of_several_answers() -> None:
    rouge = Rouge("rougeL")
    # LCS of "the cat sat on the mat" and "the cat lay on the mat" is "the cat on the mat": P = R = 5/6
    assert rouge.score("the cat sat on the mat", ["the cat lay on the mat"]) == pytest.approx(5 / 6)
    # one shared word of 2 and 4: P = 1/4, R = 1/2, F = 1/3; the better ground truth wins
    assert rouge.score("a dog barked loudly", ["dog food"]) == pytest.approx(1 / 3)
    assert rouge.score("a dog barked loudly", ["dog food", "a dog barked loudly"]) == pytest.approx(1.0)
    # bigrams: the-cat, on-the, the-mat shared, 3 of 5 on each side
    assert Rouge("rouge2").score("the cat sat on the mat", ["the cat lay on the mat"]) == pytest.approx(3 / 5)
    with pytest.raises(HaldetError, match="rougeX"):
        Rouge("rougeX")


def test_bin_edges_belong_to_the_upper_bin() -> None:
    assert [rouge_bin(x) for x in (0.0, 0.0099, 0.01, 0.0999, 0.1, 1.0)] == [
        "[0, 0.01)", "[0, 0.01)", "[0.01, 0.1)", "[0.01, 0.1)", "[0.1, 1]", "[0.1, 1]"]
    with pytest.raises(ValueError):
        rouge_bin(1.5)


def test_auroc_per_bin_with_coverage_and_the_spread_across_bins() -> None:
    items = {i.id: i for i in [_item(k, y) for k, y in enumerate([0, 1, 0, 1, 0, 1, 1, 1, 0])]}
    ids = list(items)
    bins = {i: ("[0, 0.01)" if k < 4 else "[0.01, 0.1)" if k < 8 else "[0.1, 1]") for k, i in enumerate(ids)}
    # bin 1: positives 0.9, 0.3 above negatives 0.1, 0.2 -> 1.0; bin 2: positive 0.4 below the negative 0.5,
    # positive 0.6 above -> 0.5, its fourth item NaN (coverage 3/4); bin 3: one item, one class -> no AUROC
    scores = dict(zip(ids, [0.1, 0.9, 0.2, 0.3, 0.5, 0.4, 0.6, math.nan, 0.7], strict=True))
    binned = RougeBins(bins, {}, [], "rougeL")
    rows = rouge_bin_rows(binned, items, [DetectorScores("d", {}, scores)])
    by_bin = {r["rouge_bin"]: r for r in rows}
    assert by_bin["[0, 0.01)"]["auroc"] == pytest.approx(1.0) and by_bin["[0, 0.01)"]["halluc_rate"] == 0.5
    assert by_bin["[0.01, 0.1)"]["auroc"] == pytest.approx(0.5) and by_bin["[0.01, 0.1)"]["coverage"] == 0.75
    assert by_bin["[0.01, 0.1)"]["halluc_rate"] == 0.75 and by_bin["[0.01, 0.1)"]["n"] == 4
    assert by_bin["[0.1, 1]"]["auroc"] is None and "one class" in str(by_bin["[0.1, 1]"]["note"])
    (spread,) = auroc_spread(rows)
    assert spread["spread"] == pytest.approx(0.5) and spread["n_bins"] == 2
    lone = auroc_spread([r for r in rows if r["rouge_bin"] != "[0, 0.01)"])
    assert lone[0]["spread"] is None and "two needed" in str(lone[0]["note"])


def test_items_are_binned_by_their_gold_answers_and_the_ones_without_are_counted() -> None:
    items = {i.id: i for i in [
        _item(0, 1, "It was built in 1887.", ["Captain Edda Marsh"]),         # no shared word: 0
        _item(1, 0, "Captain Edda Marsh built it.", ["Captain Edda Marsh"]),  # 3 of 5 and 3 of 3: F = 0.75
        _item(2, 1, "It was built in 1887.")]}                               # no ground truth
    binned = rouge_binned(items, list(items), Rouge())
    assert binned.bins == {"triviaplus/test/0": "[0, 0.01)", "triviaplus/test/1": "[0.1, 1]"}
    assert binned.scores["triviaplus/test/1"] == pytest.approx(0.75)
    assert binned.missing == ["triviaplus/test/2"]
    assert "1 of 3 test items have no ground-truth answer" in binned.note()


def test_without_any_ground_truth_the_table_is_one_line_saying_so() -> None:
    items = {i.id: i for i in [_item(0, 1), _item(1, 0)]}
    rows = rouge_table(rouge_binned(items, list(items), Rouge()), items, [DetectorScores("d", {}, {})])
    assert {r["detector"] for r in rows} == {DATA} and all(r["value"] is None for r in rows)
    assert "0 of 2 test items have a ground-truth answer" in rows[0]["note"]
    assert "dataset_params.triviaplus.gold_answers" in rows[0]["note"]
    text = suite_markdown(get_suite("triviaplus"), [{**r, "dataset": "triviaplus", "model": "m"} for r in rows])
    assert "Table 12 not computed" in text and "0.000" not in text
    html = get_suite("triviaplus").html_section([{**r, "dataset": "ragtruth_qa", "model": "m"} for r in rows])
    assert "<h3>Table 12 (AUROC by ROUGE bin" in html and "ragtruth_qa: Table 12 not computed: 0 of 2" in html


def _twin(tmp_path: Path, gold_column: dict[int, object] | None = None) -> Path:
    rows = triviaplus_rows.rows()
    for k, value in (gold_column or {}).items():
        rows[k]["gold_answer"] = value
    path = tmp_path / "triviaplus" / "release.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gold_answers_join_by_normalised_question_and_source_and_a_column_wins(tmp_path: Path) -> None:
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps(r) + "\n" for r in triviaplus_rows.gold_answers()))
    path = _twin(tmp_path, {18: ["the Lund company", "Lund"]})  # row 18: the railway's first answer
    items, _ = get_adapter("triviaplus", path, {"gold_answers": str(gold)}).load(limit=None)
    by_q: dict[str, list] = {}
    for inst in items:
        by_q.setdefault(inst.question, []).append((inst.meta.get("gold_answers"), inst.meta.get("gold_origin")))
    railway = by_q["What do we know about The Quarry Line railway?"]
    assert (["the Lund company", "Lund"], "column") in railway  # the row's own column first
    assert railway.count((["fourteen"], str(gold))) == 2  # the source's answer, not the other source's "seven"
    assert {a[0][0] for a in by_q["What do we know about Saint Orla's fair?"]} == {
        triviaplus_rows.gold_answers()[2]["answer"][0]}
    assert all(a == (None, None) for q, answers in by_q.items() for a in answers if "railway" not in q
               and "Orla" not in q)
    with pytest.raises(HaldetError, match="field 'gold_answer': must be an answer string"):
        get_adapter("triviaplus", _twin(tmp_path / "bad", {0: 7}), None).load(limit=None)
    assert normalise_question(" What do we know about  Saint Orla’s fair ? ") == \
        normalise_question("what do we know about saint orla s fair")


@pytest.mark.parametrize(("content", "message"), [
    (None, "gold-answers file not found"),
    ('{"question": "q?"}\n', "without an answer field"),
    ('{"answer": "a"}\n', "without a question field"),
    ('{"question": "q?", "answer": 7}\n', "must be an answer string or a list of strings"),
    ('{"question": "q?", "answer": ""}\n', "empty answer"),
    ('{"question": "q?", "answer": "[not json"}\n', "does not parse"),
    ('{"question": "q?", "answer": "a"', "cannot read the gold-answers file: malformed JSON"),
])
def test_a_bad_gold_answers_file_is_one_clear_error(tmp_path: Path, content: str | None, message: str) -> None:
    gold = tmp_path / "gold.jsonl"
    if content is not None:
        gold.write_text(content)
    with pytest.raises(HaldetError, match=message) as err:
        get_adapter("triviaplus", DATA_DIR, {"gold_answers": str(gold)})
    assert str(gold) in str(err.value.where) or "gold_answers" in str(err.value.where)
    assert err.value.hint


def test_the_companions_carry_their_releases_own_ground_truth() -> None:
    pairs, _ = get_adapter("halueval_qa_pairs", None, {"rows": 3}).load(limit=None)
    right = {i.id.rsplit(".", 1)[0]: i.response for i in pairs if i.id.endswith(".right")}
    assert all(i.meta["gold_answers"] == [right[i.id.rsplit(".", 1)[0]]] for i in pairs)
    dolly, _ = get_adapter("dolly_nc", DATA_DIR, None).load(limit=None)
    gold = {i.meta["question_id"]: i.meta.get("gold_answers") for i in dolly}
    assert gold["1002"] == ["Yes, the Eiffel Tower is taller than 300 metres."]  # well-formed answer first
    assert gold["1005"] == ["5 to 10 days"] and gold["1004"] is None  # "No Answer Present." is no answer
