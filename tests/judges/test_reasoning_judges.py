"""Judges and verifiers of reasoning models, through the mock endpoint speaking the reasoning format: the LLM judge
sees the candidate's answer (its reasoning only with `reasoning.judges_see_reasoning`), a judge's reply that comes
with a separate reasoning field or a closed `<think>` block is read after it, and one that ends inside its thinking
is a failure naming the role's reply budget, never a guessed verdict (the verdict stage of the TRIVIA+ judges and
the VeriGray classifier goes through the same client)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from haldet.backends.structured import without_thinking
from haldet.config import JudgeConfig, RunConfig
from haldet.detectors.llm_judge import FAITHFUL, HALLUCINATION
from haldet.flow.scoring import make_detector
from haldet.judges.base import JudgeFailure
from haldet.judges.llm import LLMJudge
from haldet.schema import Generation, Instance, Label
from haldet.stages.base import CellContext, Item
from haldet.stages.verdict import VerdictStage
from haldet.store import RunStore
from mock_openai import FakeOpenAI, text_content


def _pair(n: int, answer: str) -> tuple[Instance, Generation]:
    inst = Instance(id=f"t/test/{n}", dataset="t", scenario="qa_open", task_type="short_answer",
                    question="Who wrote Hamlet?", references=["William Shakespeare"])
    return inst, Generation(id=inst.id, prompt="p", response=answer, token_ids=[], token_logprobs=[],
                            finish_reason="stop", n_tokens=0, model="m", reasoning="Maybe Marlowe? No.")


def _judge(srv: FakeOpenAI, **kw: Any) -> LLMJudge:
    return LLMJudge(JudgeConfig(kind="llm", base_url=srv.base_url, model="judge-r1", retries=1, backoff=0.0,
                                timeout=5), **kw)


def _run(judge: LLMJudge, pairs: list[tuple[Instance, Generation]]) -> dict[str, Label | JudgeFailure]:
    out: dict[str, Label | JudgeFailure] = {}
    judge.judge_many(pairs, lambda i, v: out.__setitem__(pairs[i][0].id, v))  # type: ignore[arg-type]
    return out


def test_the_llm_judge_reads_the_answer_and_fails_on_an_unclosed_thinking_block() -> None:
    with FakeOpenAI() as srv:
        srv.reasoning = "The answer names Shakespeare, the acceptable answer."  # the judge is a reasoning model
        srv.plans["Christopher Marlowe"] = ["unclosed"]
        pairs = [_pair(0, "William Shakespeare"), _pair(1, "Christopher Marlowe")]
        out = _run(_judge(srv), pairs)
        assert isinstance(out["t/test/0"], Label) and out["t/test/0"].category.value == "correct"
        fail = out["t/test/1"]
        assert isinstance(fail, JudgeFailure) and fail.attempts == 2  # retried, then reported
        assert "thinking block" in fail.error and "raise judge.max_tokens" in fail.error
        users = [[m["content"] for m in body["messages"] if m["role"] == "user"][-1] for body in srv.requests]
        assert any(u.endswith("Model answer: William Shakespeare") for u in users)  # requests run concurrently
        assert not any("Marlowe? No." in u for u in users)
        # the setting shows the candidate's reasoning before its answer, and is part of the judge's key
        seeing = _judge(srv, see_reasoning=True)
        _run(seeing, pairs[:1])
        user = [m["content"] for m in srv.requests[-1]["messages"] if m["role"] == "user"][-1]
        assert "Model reasoning (written before its answer; judge the answer): Maybe Marlowe? No." in user
        assert seeing.fingerprint() != _judge(srv).fingerprint()


def test_a_closed_inline_thinking_block_is_read_past() -> None:
    def thinking_judge(arg: str, body: dict[str, Any], j: int) -> str:
        return "<think> Compare with the references. </think>\n" + json.dumps({"reasoning": "ok", "category": arg})

    with FakeOpenAI(content=thinking_judge) as srv:
        out = _run(_judge(srv), [_pair(0, "William Shakespeare")])
        assert isinstance(out["t/test/0"], Label) and out["t/test/0"].reasoning == "ok"
    assert without_thinking("<think> a </think> B", None, "stop", "x") == ("B", None)
    assert without_thinking("plain", None, "stop", "x") == ("plain", None)
    assert without_thinking("", "thought only", "length", "x")[1] is not None


def _answer_key(body: dict[str, Any]) -> str:
    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    match = re.search(r"<ANSWER>\n(.*?)\n</ANSWER>", user, re.S)
    return match.group(1) if match else ""


def test_prompted_verdicts_from_a_reasoning_endpoint(tmp_path: Path) -> None:
    items = []
    for i in range(3):
        inst = Instance(id=f"d/x/{i}", dataset="d", scenario="rag", task_type="rag", context=f"Document {i}.",
                        question=f"Question {i}?")
        items.append(Item(instance=inst, prompt="p", generation=Generation(
            id=inst.id, prompt="p", response=f"answer {i}", token_ids=[], token_logprobs=[], finish_reason="stop",
            n_tokens=0, model="m", reasoning=f"secret thought {i}")))
    with FakeOpenAI(content=text_content, key_of=_answer_key,
                    default="ok:<RESPONSE>NO HALLUCINATION</RESPONSE>") as srv:
        srv.reasoning = "Checking every claim against the document."
        srv.plans["answer 1"] = ["ok:<think> the claim about x <RESPONSE>HALLUCINATION</RESPONSE>"]  # no close
        srv.plans["answer 2"] = ["ok:<think> weigh it </think> <RESPONSE>HALLUCINATION</RESPONSE>"]
        config = RunConfig(detectors=["llm_judge"], verdict={"model": "judge-r1", "base_url": srv.base_url,
                                                             "retries": 0, "backoff": 0, "timeout": 5})
        ctx = CellContext(config=config, dataset="d", model="m", store=RunStore(tmp_path).cell("d", "m"),
                          backend_factory=lambda: None, detectors=[make_detector("llm_judge", config)])
        stage = VerdictStage(ctx)
        recs = stage.ensure(items)
        assert recs["d/x/0"]["asks"]["faithfulness"]["label"] == FAITHFUL
        assert recs["d/x/2"]["asks"]["faithfulness"]["label"] == HALLUCINATION
        assert recs["d/x/1"]["asks"].get("faithfulness") is None
        why = stage.failures["faithfulness"]["d/x/1"]
        assert "thinking block" in why and "verdict.max_new_tokens" in why
        assert not any("secret thought" in m["content"] for b in srv.requests for m in b["messages"])
