"""HalluLens offline on the fixtures with the embedded SmolLM2-135M as generator, tested model and judge (one
loaded model shared): the three tasks and the offline proxy are built and evaluated end to end. The 135M model is a
poor generator and judge (it rarely passes its own answerability check, and as abstention judge it tends to call
every answer an abstention, so the claim steps are exercised in
tests/suites/hallulens/test_hallulens_endpoint.py), so this test
checks the path and its bookkeeping, not quality: every wanted item is kept, dropped with a reason or listed as a
failed call; every evaluated item is judged or listed as failed (never both, never dropped); rates obey their
identities; the table (with the proxy labelled) and detection sets are written. Reply budgets are cut to keep the
test short."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from haldet.config import JudgeConfig
from haldet.suites.hallulens import prompts as prompt_module
from haldet.suites.hallulens.build import BuildConfig, Item
from haldet.suites.hallulens.evaluate import evaluate
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.prompts import Prompts
from haldet.suites.hallulens.sets import build_sets, read_items, write_items
from haldet.suites.hallulens.target import Target
from repo_paths import FIXTURES

FIX = FIXTURES / "hallulens"


def test_offline_end_to_end_with_the_embedded_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from haldet.backends.hf.backend import HFBackend

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
    for task in ("precisewikiqa", "longwiki"):  # every wanted item is kept, dropped with a reason, or a failed call
        rep = manifest["reports"][f"seed-3/{task}"]
        assert rep["kept"] + sum(rep["dropped"].values()) + len(rep["failures"]) == rep["wanted"] == 1
    # the offline proxy joins the same set (same settings: the manifest keeps the tasks built before)
    manifest = build_sets(set_dir, tasks=["proxy_qa"], cfg=cfg, trials=1, generators=[], prompts=Prompts())
    assert manifest["tasks"] == ["precisewikiqa", "longwiki", "nonexistent", "proxy_qa"]
    folder = set_dir / "seed-3"
    if not read_items(folder / "longwiki.jsonl"):  # the 135M generator rarely passes its own answerability check:
        # place one LongWiki prompt by hand so the claim pipeline (extraction, retrieval, verification) runs
        write_items(folder / "longwiki.jsonl", [Item(id="longwiki/3/9-0", task="longwiki", title="Marie Curie",
                                                     prompt="Describe the scientific work of Marie Curie.",
                                                     decile=9)])
    mixed = [it for it in read_items(folder / "nonexistent.jsonl") if it.subtask == "mixed"]
    assert len(mixed) == 4  # one per domain, no model needed
    out = tmp_path / "eval"
    res = evaluate(set_dir, out, targets=[Target("smollm2-135m", backend=backend)],
                   judge=model(out / "judge_cache.jsonl"), prompts=Prompts(),
                   max_new_tokens={"precisewikiqa": 24, "proxy_qa": 24, "longwiki": 40, "nonexistent": 32})
    for task in ("precisewikiqa", "longwiki", "nonexistent", "proxy_qa"):
        items = read_items(folder / f"{task}.jsonl")
        cell = out / "smollm2-135m" / "seed-3"
        judged = {json.loads(x)["id"] for x in (cell / f"{task}.judged.jsonl").read_text().splitlines()}
        failed = {json.loads(x)["id"] for x in (cell / f"{task}.failed.jsonl").read_text().splitlines()}
        assert judged | failed == {it.id for it in items} and not judged & failed
        if not items:
            continue
        trial = res["models"]["smollm2-135m"][task]["trials"]["seed-3"]
        assert trial["failed"] == len(failed)
        if task in ("precisewikiqa", "proxy_qa") and trial["n"] and trial["answered"]:
            assert trial["correct"] == pytest.approx((1 - trial["false_refusal"]) * (1 - trial["hallucination"]))
        if task == "nonexistent" and trial["n"]:
            assert all(0.0 <= v <= 1.0 for v in trial["per_domain"].values())
            assert math.isnan(trial["far"]) or 0.0 <= trial["far"] <= 1.0
    table = (out / "table.md").read_text()
    assert "smollm2-135m" in table and "proxy FR" in table and "PROXY" in table
    assert (out / "smollm2-135m" / "detection" / "nonexistent.jsonl").exists()
