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
from repo_paths import FIXTURES

DATA = FIXTURES / "datasets"


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


# --- noise regimes built from the release's raw per-worker votes -------------------------------------------------
def test_noise_regimes_from_worker_votes_follow_their_definitions() -> None:
    from haldet.suites.triviaplus.protocol import noisy_from_votes

    clean = {f"i{k:02d}": int(k % 3 == 0) for k in range(40)}
    votes = {i: [("A", y), ("B", y), ("C", y)] for i, y in clean.items()}
    for k in range(6):  # worker A dissents on i00..i05, worker B on i10..i11
        votes[f"i{k:02d}"][0] = ("A", 1 - clean[f"i{k:02d}"])
    for k in (10, 11):
        votes[f"i{k:02d}"][1] = ("B", 1 - clean[f"i{k:02d}"])
    dissent = {f"i{k:02d}" for k in (*range(6), 10, 11)}
    for method in ("rf_votes", "dl_votes", "dw_votes"):
        labels, rec = noisy_from_votes(clean, votes, method, 0.1, seed=3)
        flipped = {i for i in clean if labels[i] != clean[i]}
        assert rec["flipped"] == len(flipped) and rec["target"] == 4
        assert (labels, rec) == noisy_from_votes(clean, votes, method, 0.1, seed=3)  # seeded
        if method == "rf_votes":
            assert len(flipped) == 4
        elif method == "dl_votes":
            assert len(flipped) == 4 and flipped <= dissent
        else:  # whole workers' dissents, until the target is reached: A alone (6) or B then A (8)
            assert flipped in ({f"i{k:02d}" for k in range(6)}, dissent)
            assert rec["workers"][-1] == "A" and "C" not in rec["workers"]


def test_vote_regimes_reach_the_suite_as_label_sets(tmp_path: Path) -> None:
    import triviaplus_rows
    from haldet.suites.triviaplus.protocol import check_regime
    from haldet.suites.triviaplus.suite import with_vote_noise

    rows = triviaplus_rows.rows()
    for row in rows[:8]:  # worker 0 of the first 8 answers voted against the final label
        row["response-level-labels-bin"][0] = str(1 - row["response_level_label_binary"])
    path = tmp_path / "triviaplus" / "release.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items, _ = get_adapter("triviaplus", path, None).load(limit=None)
    assert all(len(i.meta["worker_votes"]) == 3 for i in items)
    built = with_vote_noise(items, 0.15, 0)
    rec = built[0].meta["vote_noise"]
    assert {r for r in built[0].label_variants} >= {"dw_votes", "dl_votes", "rf_votes"}
    assert rec["rf_votes"]["flipped"] == rec["dl_votes"]["flipped"] == round(0.15 * len(items))
    assert check_regime("dw_votes") == "dw_votes"


def test_hallucination_rate_tables_carry_wilson_intervals_and_reach_the_report() -> None:
    from haldet.schema import Instance
    from haldet.suites.base import get_suite
    from haldet.suites.report import suite_markdown
    from haldet.suites.triviaplus.analysis import hallucination_rates

    items = {f"triviaplus/test/{k}": Instance(
        id=f"triviaplus/test/{k}", dataset="triviaplus", scenario="rag", task_type="rag", split="test", question="q",
        response_label=Category.HALLUCINATION if k < 20 else Category.CORRECT,
        meta={"domain": "COVID", "generator": "gemma", "context_chars": 800 if k < 100 else 2_000})
        for k in range(139)}
    rows = hallucination_rates(items, list(items))
    covid = next(r for r in rows if r["table"] == "Table 8")
    # the paper's Table 8 COVID row: 20 of 139 = 14.4% [9.5%, 21.2%]
    assert (covid["n"], covid["n_pos"]) == (139, 20)
    assert round(covid["ci_low"], 3) == 0.095 and round(covid["ci_high"], 3) == 0.212
    assert {(r["stratum"], r["n"]) for r in rows if r["table"] == "Table 9"} == {("short (<1K)", 100),
                                                                                 ("medium (1K-5K)", 39)}
    report = [{"dataset": "triviaplus", "model": "m", "level": "response", "detector": "", "metric": m,
               "value": r[m], "n": r["n"], "n_pos": r["n_pos"], "coverage": 1.0, "note": "", "table": r["table"],
               "stratum": r["stratum"]} for r in rows for m in ("rate", "ci_low", "ci_high")]
    text = suite_markdown(get_suite("triviaplus"), report)
    assert "Table 10" in text and "| COVID | 0.144 | 0.095 | 0.212 | 139 |" in text


def test_companions_sft_and_another_models_samples_through_one_suite_run(tmp_path: Path, tiny_smol_llama: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`haldet run --suite triviaplus` on TRIVIA+, RAGTruth-QA and Dolly (NC) from their release files, with `sft`
    (LoRA on a tiny random Llama carrying SmolLM2's tokenizer and chat template) and `selfcheck_bertscore` whose
    samples come from another model (`sample.model`: an endpoint, the mock): every dataset gets its Table 4 and
    Tables 8-10 in suite_tables.md and report.html; the RAGTruth test part is its release's test split; SFT is fitted
    on TRIVIA+'s training answers and scores every test answer, and declines the companions' fewer than 10 training
    answers with that reason; the samples are the endpoint's, and the model that drew them keys the scores."""
    from typer.testing import CliRunner

    from haldet.cli import app
    from mock_openai import FakeOpenAI, text_content

    monkeypatch.setenv("OPENAI_API_KEY", "test")
    out, cfg = tmp_path / "run", tmp_path / "cfg.yaml"
    with FakeOpenAI(content=text_content, default="ok:The answer is in the passage.|It is not known.") as srv:
        cfg.write_text(f"detector_params: {{sft: {{model: {tiny_smol_llama}, epochs: 1, max_length: 48}}, "
                       "selfcheck_bertscore: {model: minilm}}\n"
                       f"sample: {{model: 'openai:sampler', base_url: '{srv.base_url}', k: 2, max_new_tokens: 8}}\n"
                       "evaluation: {bootstrap: 20}\n")
        result = CliRunner().invoke(app, [
            "run", "--suite", "triviaplus", "--data-dir", str(DATA), "--dataset", "triviaplus,ragtruth_qa,dolly_nc",
            "--model", str(tiny_smol_llama), "--detector", "perplexity,sft,selfcheck_bertscore", "--config",
            str(cfg), "--min-per-class", "0", "--out", str(out)])
        asked = {b["model"] for b in srv.requests}
    assert result.exit_code == 0, result.output[-3000:]
    assert asked == {"sampler"}
    rows = json.loads((out / "results.json").read_text())
    md, html = (out / "suite_tables.md").read_text(), (out / "report.html").read_text()
    for dataset in ("triviaplus", "ragtruth_qa", "dolly_nc"):
        assert {r.get("table") for r in rows if r["dataset"] == dataset} >= {None, "Table 8", "Table 9", "Table 10"}
        for title in ("Table 4 (clean test labels", "Table 10 (hallucination rate by generator"):
            assert f"{title}" in md and f": {dataset} | " in md and title in html
    ragtruth, _ = get_adapter("ragtruth_qa", DATA, None).load(limit=None)
    (main,) = [r for r in rows if r["dataset"] == "ragtruth_qa" and r["detector"] == "perplexity"
               and r.get("table") is None and r["metric"] == "auroc"]
    assert main["n"] == sum(i.meta["release_split"] == "test" for i in ragtruth) > 0
    cells = {c["dataset"]: c for c in json.loads((out / "manifest.json").read_text())["cells"]}
    cell_dir = {d: next((out / d).iterdir()) for d in cells}
    sft = [json.loads(line) for line in (cell_dir["triviaplus"] / "scores" / "sft@response@clean.jsonl").open()]
    tp_items, _ = get_adapter("triviaplus", DATA / "triviaplus" / "triviaplus_fixture.parquet").load(limit=None)
    assert {s["id"] for s in sft} == {i.id for i in tp_items if i.split != "train"}
    assert all(s["values"][0] is not None and not s["reasons"][0] for s in sft)
    (det,) = [d for d in cells["triviaplus"]["detectors"] if d["name"] == "sft"]
    assert det["identity"]["models"]["model"]["used"] == str(tiny_smol_llama) and det["fit_s"] > 0
    for dataset in ("ragtruth_qa", "dolly_nc"):
        declined = [json.loads(line) for line in (cell_dir[dataset] / "scores" / "sft@response@clean.jsonl").open()]
        assert declined and all("valid training items (need at least 10)" in s["reasons"][0] for s in declined)
    samples = [json.loads(line) for line in (cell_dir["dolly_nc"] / "sample.jsonl").open()]
    assert samples and all(s["sample_model"] == "openai:sampler" and sorted(s["samples"]) ==
                           ["It is not known.", "The answer is in the passage."] for s in samples)
    (sc,) = [d for d in cells["dolly_nc"]["detectors"] if d["name"] == "selfcheck_bertscore"]
    assert sc["identity"]["samples_model"] == "openai:sampler"
