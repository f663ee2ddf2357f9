"""TRIVIA+: the release-schema adapter, label regimes, disagreement, strata, thresholds, and the suite end to end."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import triviaplus_rows
from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.schema import Category
from haldet.suites.triviaplus.analysis import DetectorScores, main_row, strata_rows
from haldet.suites.triviaplus.dataset import locate_sentences
from haldet.suites.triviaplus.protocol import label_disagreement, length_stratum, strata_outcomes
from repo_paths import FIXTURES

FIXTURE = FIXTURES / "datasets" / "triviaplus" / "triviaplus_fixture.parquet"


def load(path: Path, **params: object):
    items, report = get_adapter("triviaplus", path, params).load(limit=None)
    return items, report


def test_release_parquet_loads_every_split_with_units_and_label_sets() -> None:
    items, report = load(FIXTURE)
    rows = triviaplus_rows.rows()
    assert len(items) == len(rows) and report.n_skipped == 0
    assert {i.split for i in items} == {"train", "val", "test"}
    by_id = {i.id: i for i in items}
    for index, row in enumerate(rows):
        inst = by_id[f"triviaplus/{ {'valid': 'val'}.get(row['split'], row['split'])}/{index}"]
        assert inst.context == row["article"] and inst.response == row["answer"]
        assert inst.response_label == (Category.HALLUCINATION if row["response_level_label_binary"] else
                                       Category.CORRECT)
        assert [u.text for u in inst.units] == row["answer_sentence_list"]
        assert [u.meta["vote"] for u in inst.units] == row["sentence_level_majority_vote"]
        assert set(inst.label_variants) == {"ws", "dw", "dl", "rf"}
        assert inst.meta["generator"] == row["model"] and inst.meta["context_chars"] == len(row["article"])
    # strictest-sentence rule of the release: unfaithful iff a sentence contradicts or is not mentioned
    for inst in items:
        assert (inst.response_label == Category.HALLUCINATION) == any(u.binary == 1 for u in inst.units)
    assert {i.meta["domain"] for i in items} == {"DROP", "MS-MARCO", "NQ", "TriviaQA", "COVID"}


def test_jsonl_twin_and_split_option(tmp_path: Path) -> None:
    jsonl = triviaplus_rows.write(tmp_path / "triviaplus" / "release.jsonl")
    a, _ = load(jsonl)
    b, _ = load(FIXTURE)
    assert sorted(i.model_dump_json() for i in a) == sorted(i.model_dump_json() for i in b)
    test_only, _ = load(FIXTURE, split="test")
    assert test_only and all(i.split == "test" for i in test_only)


def test_a_limit_keeps_every_split() -> None:
    items, _ = get_adapter("triviaplus", FIXTURE).load(limit=8)
    assert {i.split for i in items} == {"train", "val", "test"}


def test_malformed_rows_and_files_get_clear_messages(tmp_path: Path) -> None:
    rows = triviaplus_rows.rows()
    bad = dict(rows[3], sentence_level_majority_vote=["supports", "maybe"])
    path = tmp_path / "triviaplus" / "data.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], bad]))
    with pytest.raises(HaldetError) as err:
        load(path)
    assert "maybe" in err.value.message and "line 2" in err.value.message
    missing = [{k: v for k, v in r.items() if k != "answer"} for r in rows[:2]]
    path.write_text("".join(json.dumps(r) + "\n" for r in missing))
    with pytest.raises(HaldetError) as err:
        load(path)
    assert "answer" in err.value.message
    with pytest.raises(HaldetError) as err:
        get_adapter("triviaplus", None).load(limit=2)
    assert "licence" in err.value.message


def test_sentences_are_located_in_order_and_misses_counted() -> None:
    answer = "It rains.  It rains again. Then sun."
    assert locate_sentences(answer, ["It rains.", "It rains again.", "Then  sun."]) == [(0, 9), (11, 26), (27, 36)]
    assert locate_sentences(answer, ["Snow.", "Then sun."]) == [None, (27, 36)]


def test_measured_disagreement_of_noisy_label_sets() -> None:
    items, _ = load(FIXTURE)
    labels = {"clean": {i.id: int(i.response_label == Category.HALLUCINATION) for i in items}}
    for regime in ("ws", "dw", "dl", "rf"):
        labels[regime] = {i.id: int(i.label_variants[regime] == Category.HALLUCINATION) for i in items}
    rows = label_disagreement(labels, {i.id: str(i.split) for i in items})
    flips = sum(1 for r in triviaplus_rows.rows()
                if r["response_level_label_binary_15pct_noise_random_flipping"] != r["response_level_label_binary"])
    rf_all = next(r for r in rows if r["regime"] == "rf" and r["split"] == "all")
    assert rf_all["disagree"] == flips and rf_all["share"] == pytest.approx(flips / len(items))


def test_length_strata_and_fisher_by_hand() -> None:
    assert [length_stratum(n) for n in (0, 999, 1000, 4999, 5000, 94_000)] == [
        "short (<1K)", "short (<1K)", "medium (1K-5K)", "medium (1K-5K)", "long (>5K)", "long (>5K)"]
    y = np.array([1, 1, 0, 0, 1, 0])
    pred = np.array([1, 1, 0, 0, 0, 1])  # right on the first four (stratum a), wrong on both of b
    out = {o.stratum: o for o in strata_outcomes(y, pred, {"length": ["a", "a", "a", "a", "b", "b"]})}
    # 2x2 [[4, 0], [0, 2]]: two-sided Fisher p = 1 / C(6, 2) = 1/15
    assert out["a"].p_vs_rest == pytest.approx(1 / 15) and out["b"].p_vs_rest == pytest.approx(1 / 15)
    assert out["a"].confusion.accuracy == 1.0 and out["b"].confusion.f1 == 0.0


def test_threshold_from_validation_and_the_labelled_test_variant() -> None:
    items, _ = load(FIXTURE)
    by_id = {i.id: i for i in items}
    truth = {i.id: int(i.response_label == Category.HALLUCINATION) for i in items}
    val = {i.id: 0.2 + 0.6 * truth[i.id] for i in items if i.split == "val"}       # separable on validation
    test = {i.id: 0.7 if truth[i.id] else 0.1 for i in items if i.split == "test"}  # separable too
    row = main_row(DetectorScores("planted", val, test), by_id)
    assert row["auroc"] == 1.0 and row["threshold"] == 0.8 and row["tune_on"] == "val"
    # validation's threshold (0.8) misses every test positive at 0.7: recall 0, although AUROC is 1
    assert row["recall"] == 0.0
    tuned = main_row(DetectorScores("planted", val, test), by_id, tune_on="test")
    assert tuned["f1"] == 1.0 and tuned["threshold"] == 0.7
    # evaluated on a noisy test label set, the same scores measure differently
    noisy = main_row(DetectorScores("planted", val, test), by_id, eval_labels="rf", tune_on="test")
    assert noisy["eval_labels"] == "rf"
    strata = strata_rows(DetectorScores("planted", val, test), by_id)
    assert {r["dimension"] for r in strata} == {"length", "domain", "generator"}
    assert sum(r["n"] for r in strata if r["dimension"] == "length") == sum(1 for i in items if i.split == "test")


def test_suite_end_to_end_on_the_embedded_model(tmp_path: Path, cli) -> None:
    """The suite on the fixture through the real CLI: a probe trained on a noisy regime is evaluated on the clean
    test labels; Tables 3-6, Table 12 (from a gold-answers file) and the measured label noise land in results.json."""
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps(r) + "\n" for r in triviaplus_rows.gold_answers()))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("detectors: [perplexity, saplma]\nevaluation: {bootstrap: 50}\n"
                   "features: {layers: [-1]}\n"
                   f"dataset_params: {{triviaplus: {{gold_answers: {gold}}}}}\n"
                   "suite_params: {triviaplus: {train_labels: [clean, rf], context_tokens: 96, answer_map: pca}}\n")
    out = tmp_path / "run"
    res = cli("run", "--suite", "triviaplus", "--dataset", "triviaplus", "--config", str(cfg), "--data-dir",
              str(FIXTURE.parent.parent),
              "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())
    main = [r for r in rows if r.get("table") is None and r["metric"] == "auroc"]
    assert {r["detector"] for r in main} >= {"perplexity", "saplma"}
    # Fig. 1 from SAPLMA's stored hidden states (PCA here: UMAP's numba compilation would cost ~35 s)
    assert (out / "figures" / "triviaplus-fig1-triviaplus-smollm2-135m.png").stat().st_size > 1000
    # the probe trained on random-flip labels: evaluated on the clean test labels (Table 6), never on noisy ones
    t6 = [r for r in rows if r.get("table") == "Table 6" and r["detector"] == "saplma"]
    assert {r["train_labels"] for r in t6} == {"clean", "rf"}
    items, _ = get_adapter("triviaplus", FIXTURE).load(limit=None)
    test = [i for i in items if i.split == "test"]
    clean_pos = sum(1 for i in test if i.response_label == Category.HALLUCINATION)
    assert all(r["n_pos"] == clean_pos for r in t6 if r["metric"] == "auroc")
    t5 = {r["eval_labels"] for r in rows if r.get("table") == "Table 5" and r["detector"] == "perplexity"}
    # the shipped noisy columns, and the label sets built from the fixture's per-worker votes
    assert t5 == {"clean", "ws", "dw", "dl", "rf", "dw_votes", "dl_votes", "rf_votes"}
    strata = {r["stratum"] for r in rows if r.get("table") == "Table 3 / A.7" and r["dimension"] == "length"}
    assert strata <= {"short (<1K)", "medium (1K-5K)", "long (>5K)"} and strata
    noise = [r for r in rows if r.get("table") == "label noise" and r["split"] == "all" and r["metric"] == "share"]
    assert {r["eval_labels"] for r in noise} == {"ws", "dw", "dl", "rf", "dw_votes", "dl_votes", "rf_votes"}
    rates = [r for r in rows if r.get("table") == "Table 9" and r["metric"] == "rate"]
    assert rates and all(0 <= r["value"] <= 1 for r in rates)
    # every article was fitted into the 96-token budget and the policy recorded per item
    gen = [json.loads(line) for line in (out / "triviaplus" / "smollm2-135m" / "generate.jsonl").open()]
    assert gen and all(g.get("provided") for g in gen)
    assert "suite_tables.md" in {p.name for p in out.iterdir()}
    assert "Table 6" in (out / "suite_tables.md").read_text()
    # Table 12: the six test answers in the ROUGE-L bins worked out in triviaplus_rows.gold_answers()
    t12 = {(r["detector"], r["rouge_bin"], r["metric"]): r for r in rows if r.get("table") == "Table 12"}
    rate = {b: t12[("perplexity", b, "halluc_rate")]["value"] for b in ("[0, 0.01)", "[0.01, 0.1)", "[0.1, 1]")}
    assert rate == pytest.approx({"[0, 0.01)": 2 / 3, "[0.01, 0.1)": 0.0, "[0.1, 1]": 0.5})
    assert t12[("perplexity", "[0.01, 0.1)", "auroc")]["value"] is None  # one item, one class
    aurocs = [t12[("perplexity", b, "auroc")]["value"] for b in ("[0, 0.01)", "[0.1, 1]")]
    (spread,) = [r for r in rows if r.get("table") == "Table 12 spread" and r["detector"] == "perplexity"]
    assert None not in aurocs and spread["value"] == pytest.approx(max(aurocs) - min(aurocs))
    assert "Table 12" in (out / "suite_tables.md").read_text()


def test_halueval_pairs_companion_keeps_both_answers_of_a_question_in_one_part() -> None:
    items, _ = get_adapter("halueval_qa_pairs", None, {"rows": 30}).load(limit=None)
    assert len(items) == 60
    by_row: dict[str, set[str]] = {}
    for inst in items:
        by_row.setdefault(inst.id.rsplit(".", 1)[0], set()).add(str(inst.split))
        assert inst.response and inst.response_label in (Category.CORRECT, Category.HALLUCINATION)
    assert all(len(parts) == 1 for parts in by_row.values())
    assert {p for parts in by_row.values() for p in parts} == {"train", "val", "test"}
    assert sum(i.response_label == Category.HALLUCINATION for i in items) == 30


def test_halueval_pairs_keep_60_20_20_under_any_limit() -> None:
    """--limit keeps a prefix of the seeded row order; every prefix holds the parts in proportion (issue 32)."""
    adapter = get_adapter("halueval_qa_pairs", None, None)
    everything, _ = adapter.load(limit=None)
    limited, _ = adapter.load(limit=10)
    assert [i.id for i in limited] == [i.id for i in everything[:10]]

    def parts(items: list[Any]) -> tuple[int, int, int]:
        counts = Counter(str(i.split) for i in items)
        return counts["train"], counts["val"], counts["test"]

    assert parts(limited) == (6, 2, 2)
    assert parts(everything[:4]) == (2, 0, 2) and parts(everything[:30]) == (18, 6, 6)
    assert parts(everything) == (120, 40, 40)


class _Window:
    """The two things the long-context policy asks of a backend: its window and a token count."""

    def window(self) -> int:
        return 400

    def encode_text(self, text: str) -> list[int]:
        return [0] * len(text.split())


def test_long_context_policy_truncates_or_marks_items_unscorable() -> None:
    from haldet.config import RunConfig
    from haldet.suites.base import get_suite

    items, _ = load(FIXTURE)
    suite = get_suite("triviaplus")
    cfg = RunConfig(suite="triviaplus", suite_params={"triviaplus": {"context_tokens": 300}})
    fitted = suite.prepare_instances(items, _Window(), cfg)
    long_ones = [(a, b) for a, b in zip(items, fitted, strict=True) if len(a.context.split()) > 300]
    assert long_ones and all(b.meta["long_context"]["truncated"] for _, b in long_ones)
    assert all(len(b.context.split()) <= 300 and "first recorded in" in b.context for _, b in long_ones)
    short = [(a, b) for a, b in zip(items, fitted, strict=True) if len(a.context.split()) <= 300]
    assert short and all(a.context == b.context and not b.meta["long_context"]["truncated"] for a, b in short)
    skip = RunConfig(suite="triviaplus", suite_params={"triviaplus": {"context_tokens": 300, "long_context": "skip"}})
    marked = suite.prepare_instances(items, _Window(), skip)
    assert {b.id for b in marked if b.meta.get("unscorable")} == {a.id for a, _ in long_ones}
    assert all("exceeds the 300-token budget" in b.meta["unscorable"] for b in marked if b.meta.get("unscorable"))
    with pytest.raises(HaldetError):
        suite.prepare_instances(items, _Window(), RunConfig(suite="triviaplus",
                                                            suite_params={"triviaplus": {"window": 1}}))


def test_suite_tables_show_coverage_below_100_percent() -> None:
    from haldet.suites.base import get_suite
    from haldet.suites.report import suite_markdown

    rows = [{"dataset": "triviaplus", "model": "m", "level": "response", "detector": d, "metric": "auroc",
             "value": 0.6, "n": 10, "coverage": cov, "note": ""} for d, cov in (("a", 1.0), ("b", 0.8))]
    text = suite_markdown(get_suite("triviaplus"), rows)
    assert "| a | 0.600 |" in text and "| 10 |" in text and "| 10 (80%) |" in text
