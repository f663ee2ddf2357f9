"""A real run of the embedded model (SmolLM2-135M) on packaged HaluEval-QA, through the CLI, and its rerun."""

import json
import math

import pytest

pytestmark = pytest.mark.slow

ARGS = ("run", "--limit", "24", "--max-new-tokens", "24", "--batch-size", "8", "--detector", "perplexity")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    from conftest import run_cli

    out = tmp_path_factory.mktemp("e2e") / "run"
    proc = run_cli(*ARGS, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_run_writes_the_run_directory(first_run):
    out, _ = first_run
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "done"
    assert manifest["config"]["limit"] == 24 and len(manifest["config_hash"]) == 16
    assert {"torch", "transformers", "haldet", "python"} <= set(manifest["versions"])
    cell = manifest["cells"][0]
    assert cell["model_fingerprint"]["gguf_sha256_head"]
    assert cell["data"]["n_items"] == 24 and cell["data"]["fingerprint"]
    assert cell["stage_seconds"]["generate"] > 0
    assert sum(cell["labels"].values()) == 24

    gen = [json.loads(x) for x in (out / "halueval_qa" / "smollm2-135m" / "generate.jsonl").read_text().splitlines()]
    assert len({g["id"] for g in gen}) == 24
    for g in gen:
        assert len(g["token_ids"]) == len(g["token_logprobs"]) == g["n_tokens"] <= 24
        assert all(lp <= 0 for lp in g["token_logprobs"])
        assert g["prompt"].startswith("<|im_start|>system")  # the model's chat template
    split = json.loads((out / "halueval_qa" / "smollm2-135m" / "split.json").read_text())
    assert split["seed"] == 42 and split["test"]


def test_results_rows_have_the_contract_columns(first_run):
    out, proc = first_run
    rows = json.loads((out / "results.json").read_text())
    assert {r["metric"] for r in rows} == {"auroc", "aupr", "fpr95", "prr", "prr_50", "rej_auc", "aurc"}
    for r in rows:
        assert {"dataset", "scenario", "model", "detector", "family", "metric", "value", "ci_low", "ci_high",
                "n", "n_pos", "coverage"} <= set(r)
        assert r["dataset"] == "halueval_qa" and r["detector"] == "perplexity" and r["family"] == "gray"
        assert r["coverage"] == 1.0
        low = -2 if r["metric"].startswith("prr") else 0  # PRR is about -1 for the inverted oracle
        assert r["value"] is not None and low <= r["value"] <= 1 and not math.isnan(r["value"]), r
    # the AUROC is the one of the stored test scores against the stored labels (recomputed here by sklearn)
    from sklearn.metrics import roc_auc_score

    cell = out / "halueval_qa" / "smollm2-135m"
    key = json.loads((out / "manifest.json").read_text())["cells"][0]["detectors"][0]["key"]
    scores = {s["id"]: s["value"] for s in map(json.loads, (cell / "scores" / "perplexity.jsonl").read_text()
                                                .splitlines()) if s["key"] == key}
    labels = {rec["id"]: rec["category"] for rec in map(json.loads, (cell / "annotate.jsonl").read_text().splitlines())}
    test = json.loads((cell / "split.json").read_text())["test"]
    y = [int(labels[i] == "hallucination") for i in test]
    auroc = next(r["value"] for r in rows if r["metric"] == "auroc")
    assert 0 < sum(y) < len(y) and auroc == pytest.approx(roc_auc_score(y, [scores[i] for i in test]))
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header[:6] == ["dataset", "scenario", "model", "detector", "family", "metric"]
    assert "perplexity" in proc.stdout  # the printed table


def test_rerun_reuses_every_cached_item(first_run):
    from conftest import run_cli

    out, _ = first_run
    before = (out / "halueval_qa" / "smollm2-135m" / "generate.jsonl").read_text()
    proc = run_cli(*ARGS, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cells"][0]["computed"] == {"generate_computed": 0, "annotate_computed": 0}
    assert manifest["cells"][0]["detectors"][0]["cached"] is True
    assert (out / "halueval_qa" / "smollm2-135m" / "generate.jsonl").read_text() == before
