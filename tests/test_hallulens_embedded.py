"""HalluLens offline on the fixtures with the embedded SmolLM2-135M as generator, tested model and judge (one
loaded model shared): all three tasks are built and evaluated end to end. The 135M model is a poor generator and
judge, so the test checks the path and its bookkeeping, not quality: every item is either judged or listed as a
failure (never dropped, never labelled by a failure), rates obey their identities, the table and detection sets
are written. Reply budgets are cut to keep the test short."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from haldet.config import JudgeConfig
from haldet.suites.hallulens import prompts as prompt_module
from haldet.suites.hallulens.build import BuildConfig
from haldet.suites.hallulens.evaluate import Target, evaluate
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.prompts import Prompts
from haldet.suites.hallulens.sets import build_sets, read_items

FIX = Path(__file__).parent / "fixtures" / "hallulens"


def test_offline_end_to_end_with_the_embedded_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from haldet.backends.hf import HFBackend

    monkeypatch.setattr(prompt_module, "BUDGETS", {k: min(v, 48) for k, v in prompt_module.BUDGETS.items()})
    backend = HFBackend("smollm2-135m", device="cpu")

    def model(cache: Path) -> StructuredLLM:
        return StructuredLLM(JudgeConfig(backend="hf", model="smollm2-135m", retries=0), cache=cache,
                             backend=backend)

    set_dir = tmp_path / "set"
    cfg = BuildConfig(seed=3, qa_size=1, long_size=1, long_deciles=[9], qa_min_tokens=80, qa_max_tokens=200,
                      long_min_tokens=100, long_max_tokens=200, long_min_sentences=1, mixed_per_domain=1,
                      generated={"business": 1, "event": 0, "product": 0}, names_per_call=2, pages_per_slot=1)
    manifest = build_sets(set_dir, tasks=["precisewikiqa", "longwiki", "nonexistent"], cfg=cfg, trials=1,
                          generators=[model(set_dir / "cache" / "llm.jsonl")], prompts=Prompts(),
                          pages=str(FIX / "pages.jsonl"), taxonomy=str(FIX / "taxonomy.csv"),
                          medicines=str(FIX / "medicines.csv"))
    assert manifest["generators"][0]["id"] == "hf:smollm2-135m"
    folder = set_dir / "seed-3"
    mixed = [it for it in read_items(folder / "nonexistent.jsonl") if it.subtask == "mixed"]
    assert len(mixed) == 4  # one per domain, no model needed
    out = tmp_path / "eval"
    res = evaluate(set_dir, out, targets=[Target("smollm2-135m", backend=backend)],
                   judge=model(out / "judge_cache.jsonl"), prompts=Prompts(),
                   max_new_tokens={"precisewikiqa": 24, "longwiki": 40, "nonexistent": 32})
    for task in ("precisewikiqa", "longwiki", "nonexistent"):
        items = read_items(folder / f"{task}.jsonl")
        cell = out / "smollm2-135m" / "seed-3"
        judged = {json.loads(x)["id"] for x in (cell / f"{task}.judged.jsonl").read_text().splitlines()}
        failed = {json.loads(x)["id"] for x in (cell / f"{task}.failed.jsonl").read_text().splitlines()}
        assert judged | failed == {it.id for it in items} and not judged & failed
        if not items:
            continue
        trial = res["models"]["smollm2-135m"][task]["trials"]["seed-3"]
        assert trial["failed"] == len(failed)
        if task == "precisewikiqa" and trial["n"] and trial["answered"]:
            assert trial["correct"] == pytest.approx((1 - trial["false_refusal"]) * (1 - trial["hallucination"]))
        if task == "nonexistent" and trial["n"]:
            assert all(0.0 <= v <= 1.0 for v in trial["per_domain"].values())
            assert math.isnan(trial["far"]) or 0.0 <= trial["far"] <= 1.0
    assert "smollm2-135m" in (out / "table.md").read_text()
    assert (out / "smollm2-135m" / "detection" / "nonexistent.jsonl").exists()
