"""A real run of the nine black/gray-box detectors on the embedded model over packaged HaluEval-QA: every
detector gives a finite score for at least 90% of the test items, and the manifest records which NLI /
similarity / BERTScore model produced the numbers (offline: the configured fallbacks)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from haldet import run
from haldet.config import RunConfig

pytestmark = pytest.mark.slow

NINE = ["verbalized", "self_eval", "selfcheck_bertscore", "selfcheck_nli", "lexical_similarity", "perplexity",
        "ln_entropy", "sar", "semantic_entropy"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, list[dict], list]:
    out = tmp_path_factory.mktemp("bb-e2e") / "run"
    config = RunConfig.model_validate({
        "datasets": ["halueval_qa"], "models": ["smollm2-135m"], "detectors": NINE, "limit": 30,
        "generation": {"max_new_tokens": 24}, "sample": {"k": 3, "max_new_tokens": 24},
        "auxiliary": {"max_new_tokens": 24},
        "evaluation": {"bootstrap": 50},
    })
    rows, cells = run(config, out)
    return out, rows, cells


def test_every_detector_scores_at_least_90_percent(finished) -> None:
    _out, rows, cells = finished
    (cell,) = cells
    assert not cell.error
    by_name = {d.name: d for d in cell.detectors}
    assert set(by_name) == set(NINE)
    for name, det in by_name.items():
        assert not det.error, f"{name}: {det.error}"
        values = det.scores.values
        finite = sum(math.isfinite(v) for v in values) / len(values)
        assert finite >= 0.9, (name, finite, [r for r in det.scores.reasons if r])
        for v, reason in zip(values, det.scores.reasons, strict=True):
            assert math.isfinite(v) or reason, f"{name}: NaN without a reason"
    auroc = {r["detector"] for r in rows if r["metric"] == "auroc" and r["value"] is not None}
    assert auroc == set(NINE)   # a number for every detector, not a row of None


def test_manifest_records_the_pair_models(finished) -> None:
    out, _, _ = finished
    manifest = json.loads((out / "manifest.json").read_text())
    meta = {d["name"]: d["meta"] for d in manifest["cells"][0]["detectors"]}
    used = meta["selfcheck_nli"]["nli_model"]["used"]
    assert used.startswith(("hf-nli:", "llm-nli:"))
    if meta["selfcheck_nli"]["nli_model"]["requested"] != "llm:smollm2-135m" and used.startswith("llm-nli:"):
        assert meta["selfcheck_nli"]["nli_model"]["fallback_reason"]   # offline: the fallback, and why
    assert meta["semantic_entropy"]["nli_model"]["used"] == used
    assert meta["sar"]["similarity_model"]["used"].startswith(("cross-encoder:", "bi-encoder:"))
    assert meta["selfcheck_bertscore"]["model"]["used"].startswith("bertscore:")
    assert meta["selfcheck_nli"]["sentence_splitter"].startswith("spacy:")
    # the key-bearing identity agrees with what loaded, and a substitute is named in the results rows
    identity = {d["name"]: d["identity"] for d in manifest["cells"][0]["detectors"]}
    nli = identity["selfcheck_nli"]["models"]["nli_model"]
    assert nli["used"] == meta["selfcheck_nli"]["nli_model"]["loaded"] and nli["fingerprint"]
    assert identity["selfcheck_nli"]["version"] and identity["selfcheck_nli"]["variant"] == "selfcheckgpt"
    rows = json.loads((out / "results.json").read_text())
    row = next(r for r in rows if r["detector"] == "selfcheck_nli")
    assert bool(row["substitute"]) == nli["substitute"] and row["default_variant"] is True
    cell_dir = out / "halueval_qa" / "smollm2-135m"
    assert list((cell_dir / "pairs").glob("*.jsonl"))     # the per-run pair cache
