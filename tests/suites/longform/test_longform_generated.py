"""Biographies written by the run's model from an entity list (FActScore's procedure): the entity file, its
knowledge pages, the clear refusal of a setting that would leave them unlabelled, and (slow) the whole flow
offline: the embedded model writes 2 biographies, a mock endpoint extracts and verifies their claims."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from haldet.datasets.base import DATASETS
from haldet.text.claim_spans import content_words
from repo_paths import FIXTURES


def test_entity_list_gives_bio_prompts_with_their_pages(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "bio_entities", tmp_path / "bio_entities")
    instances, _ = DATASETS.get("bio_entities")(
        data_dir=tmp_path, knowledge=str(FIXTURES / "longform_knowledge.jsonl")).load(seed=0)
    by_topic = {i.meta["topic"]: i for i in instances}
    assert sorted(by_topic) == ["Marta Kessling", "Oren Dalby", "Tomasz Wilk"]  # the blank line is no entity
    marta = by_topic["Marta Kessling"]
    assert marta.question == "Tell me a bio of Marta Kessling." and marta.response is None
    assert marta.id == "bio_entities/test/Marta_Kessling" and marta.references[0].startswith("Marta Kessling (born")
    assert marta.scenario == "longform" and marta.units == []


def _mock_reply(arg: str, body: dict[str, Any], j: int) -> str:
    """The extractor (the answer's sentences) and the verifier (supported when every content word of the
    statement is in the passages), told apart by their prompts."""
    prompt = body["messages"][-1]["content"]
    if "Statement:" in prompt:
        statement = prompt.rsplit("Statement:", 1)[1].split("\n", 1)[0]
        evidence = " ".join(line for line in prompt.splitlines() if line.startswith("Passage "))
        ok = set(content_words(statement)) <= set(content_words(evidence))
        return '{"supported": %s, "reasoning": "word check"}' % ("true" if ok else "false")
    answer = prompt.rsplit("Answer:\n", 1)[1]
    return json.dumps([s for s in re.split(r"(?<=[.!?])\s+", answer.strip()) if s])


@pytest.mark.slow
def test_generated_biographies_end_to_end_offline(tmp_path: Path) -> None:
    from conftest import run_cli
    from mock_openai import FakeOpenAI

    (tmp_path / "data" / "bio_entities").mkdir(parents=True)
    (tmp_path / "data" / "bio_entities" / "prompt_entities.txt").write_text("Marta Kessling\nOren Dalby\n")
    config = tmp_path / "run.yaml"
    out = tmp_path / "run"
    with FakeOpenAI(content=_mock_reply, default="ok:x") as srv:
        config.write_text(json.dumps({
            "generation": {"max_new_tokens": 48},
            "dataset_params": {"bio_entities": {"knowledge": str(FIXTURES / "longform_knowledge.jsonl")}},
            "claims": {"model": "extractor-x", "base_url": srv.base_url, "retries": 0, "timeout": 10},
            "judge": {"model": "verifier-x", "base_url": srv.base_url, "retries": 0, "timeout": 10},
            "suite_params": {"longform": {"claims": "extract", "labels": "verify", "retrieval": "bm25"}}}))
        proc = run_cli("run", "--dataset", "bio_entities", "--data-dir", str(tmp_path / "data"), "--detector",
                       "likelihood,p_true_claims", "--level", "claim,response", "--min-per-class", "0",
                       "--allow-failures",
                       "--config", str(config), "--out", str(out))
        assert proc.returncode == 0, proc.stderr[-3000:]
        verifier_calls = sum("Statement:" in r["messages"][-1]["content"] for r in srv.requests)
    cell = out / "bio_entities" / "smollm2-135m"
    answers = {r["id"]: r["response"] for r in map(json.loads, (cell / "generate.jsonl").read_text().splitlines())}
    assert len(answers) == 2 and all(a.strip() for a in answers.values())  # the embedded model wrote them
    rows = list(csv.DictReader((out / "unit_scores.csv").open()))
    claims = [r for r in rows if r["level"] == "claim" and r["detector"] == "likelihood"]
    doubts = [r for r in rows if r["level"] == "claim" and r["detector"] == "p_true_claims"]
    assert len(doubts) == len(claims) and all(0 <= float(r["score"]) <= 1 for r in doubts)  # one question per claim
    extracted = [json.loads(x) for x in (cell / "claims.jsonl").read_text().splitlines()]
    assert len(claims) == sum(len(r["claims"]) for r in extracted) > 0
    assert all(r["label"] in ("0", "1", "0.0", "1.0") for r in claims)  # every claim labelled by the verifier
    assert 0 < verifier_calls <= len(claims)  # the rule decides some claims without a call
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["suite"] == "longform"


def test_generated_biographies_need_extracted_and_labelled_claims() -> None:
    from types import SimpleNamespace

    from haldet.config import RunConfig
    from haldet.errors import HaldetError
    from haldet.suites.base import SUITES

    suite = SUITES.get("longform")()
    assert suite.answers_of("bio_entities") == "generate_unjudged" and suite.answers_of("factscore_bio") == "provided"
    for params in ({}, {"claims": "extract"}, {"labels": "verify"}):
        ctx = SimpleNamespace(config=RunConfig.model_validate({"suite_params": {"longform": params}}),
                              dataset="bio_entities")
        with pytest.raises(HaldetError, match="written by the model: they have no claims or labels of their own"):
            suite.answered(ctx, [])
