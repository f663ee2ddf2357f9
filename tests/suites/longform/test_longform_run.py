"""`haldet run --dataset factscore_bio --level claim,response` end to end with the embedded model on the
FActScore-schema fixture: claim-level AUROC recomputed from `unit_scores.csv` with sklearn, and the response
rows computed from the claims."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from repo_paths import FIXTURES

pytestmark = pytest.mark.slow

FIXTURE = FIXTURES / "factscore_bio"


def _tiny_nli(path: Path) -> Path:
    """A randomly initialised 2-layer BERT NLI classifier (MNLI labels) with the packaged MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from haldet.util.assets import resolve_embedding

    tok = AutoTokenizer.from_pretrained(resolve_embedding("minilm"))
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        num_labels=3, id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_claim_level_run_and_auroc_from_unit_scores(tmp_path: Path) -> None:
    from conftest import run_cli

    shutil.copytree(FIXTURE, tmp_path / "data" / "factscore_bio")
    out = tmp_path / "run"
    proc = run_cli("run", "--dataset", "factscore_bio", "--data-dir", str(tmp_path / "data"), "--detector",
                   "likelihood,entropy", "--level", "claim,response", "--min-per-class", "0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Claim level" in proc.stdout and "Response level from claims" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["suite"] == "longform"
    assert manifest["config"]["suite_params"]["longform"]["levels"] == ["claim", "response"]
    units = list(csv.DictReader((out / "unit_scores.csv").open()))
    results = json.loads((out / "results.json").read_text())
    results = results if isinstance(results, list) else results["rows"]
    for detector in ("likelihood", "entropy"):
        claims = [r for r in units if r["detector"] == detector and r["level"] == "claim" and r["part"] == "test"]
        assert len(claims) == 67 and len({r["item_id"] for r in claims}) == 8
        kept = [r for r in claims if r["label"] != "" and r["score"] != ""]
        y = np.array([int(float(r["label"])) for r in kept])
        s = np.array([float(r["score"]) for r in kept])
        assert 0 < y.sum() < len(y)
        reported = next(r for r in results if r["detector"] == detector and r["level"] == "claim"
                        and r["metric"] == "auroc" and not r.get("table"))
        assert reported["value"] == pytest.approx(roc_auc_score(y, s), abs=1e-9)
        from_claims = [r for r in results if r["detector"] == detector and r.get("table") == "response from claims"]
        assert {(r["aggregate"], r["metric"]) for r in from_claims} == {
            (a, m) for a in ("worst_claim", "claim_share") for m in ("auroc", "aupr", "spearman_unsupported_share")}
        worst = {}
        for r in claims:  # the worst claim of each answer, recomputed: its AUROC against "holds an NS claim"
            if r["score"] != "":
                worst[r["item_id"]] = max(worst.get(r["item_id"], -np.inf), float(r["score"]))
        bad = {r["item_id"] for r in claims if r["label"] in ("1", "1.0")}
        ids = sorted(worst)
        expected = roc_auc_score([int(i in bad) for i in ids], [worst[i] for i in ids])
        row = next(r for r in from_claims if r["aggregate"] == "worst_claim" and r["metric"] == "auroc")
        assert row["value"] == pytest.approx(expected) and row["dataset"] == "factscore_bio"



def test_extracted_claims_through_a_mock_endpoint_in_a_run(tmp_path: Path) -> None:
    """`suite_params.longform.claims: extract`: the claims stage asks the (mock) extractor for each answer's
    claims; a planted claim that is in no answer is listed as unmapped and scored nowhere."""
    from conftest import run_cli
    from mock_openai import FakeOpenAI

    planted = "Marta Kessling won the Fields Medal in Lisbon."

    def claims_of(arg: str, body: dict, j: int) -> str:  # the answer's sentences (+ the planted one for one answer)
        answer = body["messages"][-1]["content"].rsplit("Answer:\n", 1)[1]
        claims = re.split(r"(?<=\.) (?=[A-Z])", answer)
        return json.dumps(claims + ([planted] if answer.startswith("Marta Kessling") else []))

    shutil.copytree(FIXTURE, tmp_path / "data" / "factscore_bio")
    config = tmp_path / "run.yaml"
    with FakeOpenAI(content=claims_of, default="ok:claims") as srv:
        config.write_text(json.dumps({"claims": {"model": "extractor-x", "base_url": srv.base_url, "retries": 0,
                                                 "timeout": 10},
                                      "suite_params": {"longform": {"claims": "extract"}}}))
        out = tmp_path / "run"
        proc = run_cli("run", "--dataset", "factscore_bio", "--data-dir", str(tmp_path / "data"), "--detector",
                       "likelihood", "--level", "claim,response", "--min-per-class", "0", "--config", str(config),
                       "--out", str(out))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(srv.requests) == 8
    recs = [json.loads(x) for x in (out / "factscore_bio" / "smollm2-135m" / "claims.jsonl").read_text().splitlines()]
    marta = next(r for r in recs if r["id"].endswith("ChatGPT-Marta_Kessling"))
    assert marta["unmapped"] == [planted] and len(marta["claims"]) == 4 and marta["judge"] == "extractor-x"
    assert all(r["unmapped"] == [] for r in recs if r is not marta)
    units = [r for r in csv.DictReader((out / "unit_scores.csv").open()) if r["level"] == "claim"]
    assert len(units) == sum(len(r["claims"]) for r in recs) == 33  # every sentence; nothing planted
    assert all(r["label"] == "" for r in units)  # extracted claims carry no label of their own
    response = [r for r in csv.DictReader((out / "unit_scores.csv").open()) if r["level"] == "response"]
    assert sorted(r["label"] for r in response) == ["0"] * 3 + ["1"] * 5  # the answers keep the data's labels
    results = json.loads((out / "results.json").read_text())
    results = results if isinstance(results, list) else results["rows"]
    counts = {r["metric"]: r["value"] for r in results if r.get("table") == "extraction"}
    assert counts == {"answers": 8, "answers_failed": 0, "claims_kept": 33, "claims_unmapped": 1,
                      "unmapped_share": pytest.approx(1 / 34)}
    assert "Claims extracted" in proc.stdout


def test_nli_labels_against_a_knowledge_source_in_a_run(tmp_path: Path) -> None:
    """`labels: nli` with a (tiny, randomly initialised) local NLI model and a FActScore-format knowledge source:
    every claim of an item with a page gets an NLI label, recorded as such, and the agreement row is written."""
    from conftest import run_cli

    nli = _tiny_nli(tmp_path / "tiny-nli")
    pages = tmp_path / "kb.jsonl"
    pages.write_text("".join(json.dumps({"title": t, "text": f"{t} is a person. {t} was born in a city."}) + "\n"
                             for t in ("Marta Kessling", "Oren Dalby", "Lucia Ferrandi", "Tomasz Wilk",
                                       "Amara Osei", "Henrik Sollberg")))
    shutil.copytree(FIXTURE, tmp_path / "data" / "factscore_bio")
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({"dataset_params": {"factscore_bio": {"knowledge": str(pages)}},
                                  "suite_params": {"longform": {"labels": "nli", "nli_model": str(nli)}}}))
    out = tmp_path / "run"
    proc = run_cli("run", "--dataset", "factscore_bio", "--data-dir", str(tmp_path / "data"), "--detector",
                   "likelihood", "--level", "claim", "--min-per-class", "0", "--allow-failures", "--config",
                   str(config), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    results = results if isinstance(results, list) else results["rows"]
    agree = next(r for r in results if r.get("table") == "claim labels" and r["metric"] == "agreement")
    assert agree["n"] == 67 and agree["detector"] == "(data)" and agree["labeller"].startswith("nli:")
    assert agree["data0_labeller0"] + agree["data0_labeller1"] == 49
    assert agree["data1_labeller0"] + agree["data1_labeller1"] == 18
    assert agree["value"] == pytest.approx((agree["data0_labeller0"] + agree["data1_labeller1"]) / 67)
    assert (out / "factscore_bio" / "smollm2-135m" / "pairs").is_dir()  # the NLI pairs are cached in the cell


def test_claim_level_selfcheck_in_a_run(tmp_path: Path) -> None:
    """`--detector selfcheck_claims`: K samples of the proxy model per answer, each claim against them by NLI (a
    tiny local model); every claim and every answer gets a score, and the claim-level AUROC is the sklearn one."""
    from conftest import run_cli

    nli = _tiny_nli(tmp_path / "tiny-nli")
    shutil.copytree(FIXTURE, tmp_path / "data" / "factscore_bio")
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({"sample": {"k": 2, "max_new_tokens": 16},
                                  "detector_params": {"selfcheck_claims": {"nli_model": str(nli)}}}))
    out = tmp_path / "run"
    proc = run_cli("run", "--dataset", "factscore_bio", "--data-dir", str(tmp_path / "data"), "--detector",
                   "selfcheck_claims", "--level", "claim,response", "--min-per-class", "0", "--allow-failures",
                   "--config", str(config), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    units = [r for r in csv.DictReader((out / "unit_scores.csv").open()) if r["detector"] == "selfcheck_claims"]
    claims = [r for r in units if r["level"] == "claim"]
    assert len(claims) == 67 and all(r["score"] != "" and 0 <= float(r["score"]) <= 1 for r in claims)
    assert len([r for r in units if r["level"] == "response" and r["score"] != ""]) == 8
    results = json.loads((out / "results.json").read_text())
    results = results if isinstance(results, list) else results["rows"]
    reported = next(r for r in results if r["detector"] == "selfcheck_claims" and r["level"] == "claim"
                    and r["metric"] == "auroc" and not r.get("table"))
    y = [int(float(r["label"])) for r in claims]
    assert reported["value"] == pytest.approx(roc_auc_score(y, [float(r["score"]) for r in claims]))


def test_verifier_labels_and_their_agreement_with_the_human_labels_in_a_run(tmp_path: Path) -> None:
    """`labels: verify` on the FActScore-schema fixture (its human labels are the hand-labelled sample): every claim
    relabelled by retrieval + a mock verifier endpoint, and the report's `claim labels` rows give the verifier's
    accuracy and Cohen's kappa against the human labels."""
    from sklearn.metrics import cohen_kappa_score

    from conftest import run_cli
    from haldet.text.claim_spans import content_words
    from mock_openai import FakeOpenAI

    def verify(arg: str, body: dict, j: int) -> str:  # supported when the passages hold the statement's words
        prompt = body["messages"][-1]["content"]
        statement = prompt.rsplit("Statement:", 1)[1].split("\n", 1)[0]
        evidence = " ".join(line for line in prompt.splitlines() if line.startswith("Passage "))
        ok = set(content_words(statement)) <= set(content_words(evidence))
        return json.dumps({"supported": ok, "reasoning": "word check"})

    shutil.copytree(FIXTURE, tmp_path / "data" / "factscore_bio")
    config = tmp_path / "run.yaml"
    out = tmp_path / "run"
    with FakeOpenAI(content=verify, default="ok:x") as srv:
        config.write_text(json.dumps({
            "dataset_params": {"factscore_bio": {"knowledge": str(FIXTURE.parent / "longform_knowledge.jsonl")}},
            "judge": {"model": "verifier-x", "base_url": srv.base_url, "retries": 0, "timeout": 10},
            "suite_params": {"longform": {"labels": "verify", "retrieval": "bm25", "passage_tokens": 24,
                                          "verify_passages": 2}}}))
        proc = run_cli("run", "--dataset", "factscore_bio", "--data-dir", str(tmp_path / "data"), "--detector",
                       "likelihood", "--level", "claim", "--min-per-class", "0", "--allow-failures", "--config",
                       str(config), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Claim labels vs the human labels" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    results = results if isinstance(results, list) else results["rows"]
    rows = {r["metric"]: r for r in results if r.get("table") == "claim labels"}
    agree, kappa = rows["agreement"], rows["kappa"]
    assert agree["n"] == 67 and agree["labeller"] == "rule:in_passage, verify:openai:verifier-x"
    pairs = [(d, v) for d in (0, 1) for v in (0, 1) for _ in range(agree[f"data{d}_labeller{v}"])]
    assert agree["value"] == pytest.approx(sum(d == v for d, v in pairs) / 67)
    assert kappa["value"] == pytest.approx(cohen_kappa_score([d for d, _ in pairs], [v for _, v in pairs]))
    print(f"verifier vs human labels in a run: accuracy {agree['value']:.3f}, kappa {kappa['value']:.3f}")
    units = [r for r in csv.DictReader((out / "unit_scores.csv").open()) if r["level"] == "claim"]
    assert len(units) == 67 and all(r["label"] != "" for r in units)  # every claim has the verifier's label
