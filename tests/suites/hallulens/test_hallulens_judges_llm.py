"""HalluLens with the paper's protocol: `--judges llm` (the LLM judge decides every answer, no rule first) and
Kendall's tau of each NonExistentRefusal subtask against their average."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from typer.testing import CliRunner

from haldet.cli import app
from haldet.config import JudgeConfig
from haldet.errors import HaldetError
from haldet.suites.hallulens.build import Item
from haldet.suites.hallulens.judges import HalluLensJudges
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.prompts import Prompts
from haldet.suites.hallulens.rates import kendall_between_tasks
from mock_openai import FakeOpenAI


def _judge_reply(arg: str, body: dict[str, Any], j: int) -> str:
    text = body["messages"][-1]["content"]
    if "Decide whether the chatbot declines" in text:
        return json.dumps({"reasoning": "r", "abstains": "I don't know." in text})
    if "Judge whether a reply answers" in text:
        return "INCORRECT"  # even for an answer stating the gold: the LLM, not the substring rule, decides
    if "which does not exist" in text:
        return json.dumps({"reasoning": "r", "believes": False})
    raise AssertionError(text)


def test_llm_mode_asks_the_llm_for_every_decision_the_cascade_takes_by_rule() -> None:
    items = [Item(id=f"q/1/{k}", task="precisewikiqa", prompt="Who discovered radium?", answer="Marie Curie")
             for k in "abc"]
    responses = {"q/1/a": "It was Marie Curie, with Pierre.", "q/1/b": "I don't know.", "q/1/c": ""}
    with FakeOpenAI(content=_judge_reply, key_of=lambda body: "judge") as srv:
        llm = StructuredLLM(JudgeConfig(backend="openai", model="judge", base_url=srv.base_url, retries=0,
                                        json_mode=False))
        cascade = HalluLensJudges(llm, Prompts()).judge(items, responses)
        asked_by_cascade = len(srv.requests)
        paper = HalluLensJudges(llm, Prompts(), mode="llm").judge(items, responses)
        asked_by_llm = len(srv.requests) - asked_by_cascade
    # the cascade: gold stated -> CORRECT, a refusal phrase and an empty reply -> abstained, all by rule, no call
    assert cascade.records["q/1/a"]["verdict_by"] == "rule:gold_match" and asked_by_cascade == 0
    assert {cascade.records[i]["abstained_by"] for i in ("q/1/b", "q/1/c")} == {"rule:refusal", "rule:empty"}
    # --judges llm: three abstention calls, then correctness for the one answer the LLM says is not a refusal
    rec = paper.records["q/1/a"]
    assert rec["abstained_by"] == llm.id and rec["verdict_by"] == llm.id and rec["verdict"] == "INCORRECT"
    assert all(paper.records[i]["abstained_by"] == llm.id for i in ("q/1/b", "q/1/c"))
    assert asked_by_llm == 3 + sum(not r["abstained"] for r in paper.records.values())
    assert HalluLensJudges(llm, Prompts(), mode="llm").fingerprint() != HalluLensJudges(llm, Prompts()).fingerprint()
    # NonExistentRefusal: an opening refusal is the LLM's call too
    ne = [Item(id="n/1/a", task="nonexistent", prompt="Tell me about Felis leo.", name="Felis leo", type="animal",
               subtask="mixed", domain="animal")]
    with FakeOpenAI(content=_judge_reply, key_of=lambda body: "judge") as srv:
        llm = StructuredLLM(JudgeConfig(backend="openai", model="judge", base_url=srv.base_url, retries=0,
                                        json_mode=False))
        out = HalluLensJudges(llm, Prompts(), mode="llm").judge(ne, {"n/1/a": "I couldn't find any information."})
    assert out.records["n/1/a"]["believes_by"] == llm.id


def test_llm_judges_need_a_judge_model(tmp_path) -> None:
    result = CliRunner().invoke(app, ["hallulens", "evaluate", "--set", str(tmp_path), "--out", str(tmp_path / "o"),
                                      "--model", "m", "--judges", "llm"])
    assert isinstance(result.exception, HaldetError) and "--judges llm needs an LLM judge" in str(result.exception)


def test_kendall_tau_of_each_subtask_against_their_average() -> None:
    mixed, generated = [0.1, 0.2, 0.3, 0.4], [0.3, 0.2, 0.4, 0.5]
    pairs = enumerate(zip(mixed, generated, strict=True))
    means = {f"m{i}": {("nonexistent", "mixed"): x, ("nonexistent", "generated"): g,
                       ("nonexistent", "far"): (x + g) / 2} for i, (x, g) in pairs}
    rows = {(r["a"], r["b"]): r for r in kendall_between_tasks(means)}
    assert set(rows) == {("nonexistent/mixed", "nonexistent/generated"), ("nonexistent/mixed", "nonexistent/far"),
                         ("nonexistent/generated", "nonexistent/far")}
    # far = 0.2, 0.2, 0.35, 0.45: against either subtask 5 concordant pairs, none discordant, one tie in far:
    # tau-b = 5 / sqrt(6 * 5)
    assert rows[("nonexistent/mixed", "nonexistent/far")]["tau"] == pytest.approx(5 / math.sqrt(30))
    assert rows[("nonexistent/generated", "nonexistent/far")]["tau"] == pytest.approx(5 / math.sqrt(30))
    assert rows[("nonexistent/mixed", "nonexistent/generated")]["tau"] == pytest.approx(2 / 3)
