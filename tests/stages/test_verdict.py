"""The verdict stage (prompted LLM verdicts) and the LLM-as-a-judge detectors, against a local mock endpoint."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from haldet.config import RunConfig
from haldet.detectors.llm_judge import FAITHFUL, HALLUCINATION, parse_faithfulness
from haldet.flow.scoring import make_detector
from haldet.schema import Generation, Instance
from haldet.signals import Signal
from haldet.stages.base import CellContext, Item
from haldet.stages.loader import EvidenceLoader
from haldet.stages.verdict import VerdictStage
from haldet.store import RunStore
from mock_openai import FakeOpenAI, text_content

H = "<THINKING>Checked.</THINKING> <RESPONSE>HALLUCINATION</RESPONSE>"
F = "<THINKING>All supported.</THINKING> <RESPONSE>NO HALLUCINATION</RESPONSE>"


@pytest.mark.parametrize(("reply", "label"), [
    (H, HALLUCINATION), (F, FAITHFUL), ("<RESPONSE> no hallucination </RESPONSE>", FAITHFUL),
    ("<THINKING>could be a hallucination</THINKING><RESPONSE>NO HALLUCINATION</RESPONSE>", FAITHFUL),
    ("<THINKING>looks fine, no hallucination</THINKING><RESPONSE>HALLUCINATION</RESPONSE>", HALLUCINATION),
    ("Verdict: NO HALLUCINATION.", FAITHFUL), ("HALLUCINATED", HALLUCINATION),
    ("I cannot tell.", None), ("<RESPONSE></RESPONSE>", None),
])
def test_faithfulness_parser(reply: str, label: str | None) -> None:
    parsed, why = parse_faithfulness(reply)
    assert parsed == label
    assert (why == "") == (label is not None)


def _answer_key(body: dict[str, Any]) -> str:
    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    match = re.search(r"<ANSWER>\n(.*?)\n</ANSWER>", user, re.S)
    return match.group(1) if match else ""


def _items() -> list[Item]:
    items = []
    for i in range(8):
        inst = Instance(id=f"d/x/{i}", dataset="d", scenario="rag", task_type="rag", context=f"Document {i}.",
                        question=f"Question {i}?")
        gen = Generation(id=inst.id, prompt="p", response=f"answer {i}", token_ids=[], token_logprobs=[],
                         finish_reason="provided", n_tokens=0, model="m")
        items.append(Item(instance=inst, prompt=f"prompt {i}", generation=gen))
    return items


def _ctx(tmp: Path, srv: FakeOpenAI, detectors: list[str], params: dict[str, Any]) -> CellContext:
    config = RunConfig(detectors=detectors, detector_params=params,
                       verdict={"model": "judge-x", "base_url": srv.base_url, "retries": 1, "backoff": 0,
                                "timeout": 5})
    return CellContext(config=config, dataset="d", model="m", store=RunStore(tmp).cell("d", "m"),
                       backend_factory=lambda: (_ for _ in ()).throw(AssertionError("no local backend")),
                       detectors=[make_detector(name, config) for name in detectors])


def test_verdicts_failures_and_few_shot_examples(tmp_path: Path) -> None:
    items = _items()
    labels = {it.id: int(i % 2 == 0) for i, it in enumerate(items)}  # even = hallucinated
    split = {"train": ["d/x/0", "d/x/1"], "val": ["d/x/2", "d/x/3", "d/x/4"], "test": ["d/x/5", "d/x/6", "d/x/7"]}
    with FakeOpenAI(content=text_content, key_of=_answer_key, default=f"ok:{F}") as srv:
        srv.plans["answer 0"] = [f"ok:{H}"]
        srv.plans["answer 2"] = [f"ok:{H}"]       # val, right
        # answer 3 (val, faithful) judged faithful: right; answer 4 (val, hallucinated) judged faithful: wrong
        srv.plans["answer 6"] = ["500"]           # fails after its retries: no record, never a label
        srv.plans["answer 7"] = ["ok:I am not sure."]  # unparsable: recorded as such
        ctx = _ctx(tmp_path, srv, ["llm_judge", "llm_judge_fs"], {"llm_judge_fs": {"shots": 1}})
        ctx.split, ctx.labels = split, labels
        stage = VerdictStage(ctx)
        recs = stage.ensure(items)
        zero = {i: r["asks"].get("faithfulness") for i, r in recs.items()}
        few = {i: r["asks"].get("faithfulness@1shot") for i, r in recs.items()}
        assert zero["d/x/0"]["label"] == HALLUCINATION and zero["d/x/1"]["label"] == FAITHFUL
        assert zero["d/x/6"] is None and few["d/x/6"] is None
        assert "d/x/6" in stage.failures["faithfulness"] and "500" in stage.failures["faithfulness"]["d/x/6"]
        assert zero["d/x/7"]["label"] is None and zero["d/x/7"]["reason"]
        assert zero["d/x/0"]["judge"] == "judge-x"
        # the only misclassified validation item (answer 4, hallucinated, judged faithful) is the demonstration,
        # shown with its training label
        fs_requests = [b for b in srv.requests if len(b["messages"]) > 2]
        assert fs_requests and all("answer 4" in b["messages"][1]["content"] for b in fs_requests)
        assert all(b["messages"][2]["content"] == f"<RESPONSE>{HALLUCINATION}</RESPONSE>" for b in fs_requests)
        assert not any("answer 5" in b["messages"][1]["content"] for b in fs_requests)  # never a test item
        # a rerun asks only what has no record: the failed item, for each ask
        n_before = len(srv.requests)
        srv.plans["answer 6"] = [f"ok:{H}"]
        again = VerdictStage(ctx).ensure(items)
        assert len(srv.requests) - n_before == 2
        assert again["d/x/6"]["asks"]["faithfulness"]["label"] == HALLUCINATION

        # the detectors read the stage through the signal view: NaN with the reason, never a number, on failure
        from haldet.detectors.llm_judge import LLMJudgeDetector
        from haldet.signals import SignalView

        srv.plans["answer 6"] = ["500"]
        view = SignalView(ids=[i.id for i in items], instances=[i.instance for i in items],
                          generations=[i.generation for i in items if i.generation],
                          loader=EvidenceLoader(ctx, items))
        scores = LLMJudgeDetector().score(view)
        assert scores.values[0] == 1.0 and scores.values[1] == 0.0
        assert np.isnan(scores.values[7]) and "verdict" in scores.reasons[7]
        assert view.get(Signal.VERDICT)[0]["faithfulness"]["judge"] == "judge-x"


def test_changing_the_demonstrations_changes_the_few_shot_key(tmp_path: Path) -> None:
    items = _items()
    split = {"train": [], "val": ["d/x/2", "d/x/3", "d/x/4"], "test": ["d/x/5"]}
    with FakeOpenAI(content=text_content, key_of=_answer_key, default=f"ok:{F}") as srv:
        ctx = _ctx(tmp_path, srv, ["llm_judge_fs"], {"llm_judge_fs": {"shots": 1}})
        ctx.split, ctx.labels = split, {"d/x/2": 1, "d/x/3": 0, "d/x/4": 0}
        stage = VerdictStage(ctx)
        stage.ensure(items)
        first = stage.ask_key(stage.asks[-1], items[5])
        ctx.labels = {"d/x/2": 0, "d/x/3": 0, "d/x/4": 1}  # another training-label regime: another demonstration
        stage2 = VerdictStage(ctx)
        stage2.ensure(items)
        assert stage2.ask_key(stage2.asks[-1], items[5]) != first


def test_local_verdicts_sample_at_the_configured_temperature(tmp_path: Path) -> None:
    """The run's own model answers with `verdict.temperature`: greedy at 0, else one seeded sample per prompt (the
    seed depends on the prompt only, so a prompt's reply does not depend on its batch)."""
    from types import SimpleNamespace

    from haldet.stages.verdict import VerdictStage

    calls: list[tuple[str, Any]] = []

    class Backend:
        def render_chat(self, chat: list[dict[str, str]]) -> str:
            return chat[-1]["content"]

        def generate(self, prompts: list[str], **kw: Any) -> list[Any]:
            calls.append(("generate", None))
            return [SimpleNamespace(text=f"greedy {p}", token_ids=[]) for p in prompts]

        def sample(self, prompts: list[str], **kw: Any) -> list[Any]:
            calls.append(("sample", (kw["temperature"], kw["k"], list(kw["seeds"]))))
            return [[SimpleNamespace(text=f"sampled {p}", token_ids=[])] for p in prompts]

    chats = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    for temperature in (0.0, 0.6):
        ctx = SimpleNamespace(config=RunConfig(verdict={"temperature": temperature}), model="m", backend=Backend())
        replies = [r.text for r in VerdictStage(ctx, asks=[])._ask(chats, 16)]
        assert replies == (["greedy a", "greedy b"] if temperature == 0 else ["sampled a", "sampled b"])
    assert calls[0] == ("generate", None) and calls[1][0] == "sample" and calls[1][1][:2] == (0.6, 1)
    ctx = SimpleNamespace(config=RunConfig(verdict={"temperature": 0.6}), model="m", backend=Backend())
    VerdictStage(ctx, asks=[])._ask(chats[::-1], 16)
    assert calls[2][1][2] == calls[1][1][2][::-1]  # per-prompt seeds, whatever the order


def test_judge_prompt_templates_replace_the_wording_and_key_the_verdicts(tmp_path: Path) -> None:
    """`templates: faithfulness_system / faithfulness_user` (inline or a file) are what the judge is sent; the
    packaged wording is the default (its exact user turn checked here) and a replaced text changes the key."""
    items = _items()[:2]
    system = tmp_path / "system.txt"
    system.write_text("Judge strictly.\n", encoding="utf-8")
    user = "Doc: {{ context }}\n<ANSWER>\n{{ answer }}\n</ANSWER>\nVerdict?"
    with FakeOpenAI(content=text_content, key_of=_answer_key, default=f"ok:{F}") as srv:
        plain = _ctx(tmp_path / "a", srv, ["llm_judge"], {})
        VerdictStage(plain).ensure(items)
        # item 1's request (the two items' requests may complete in either order)
        sent = next(r["messages"] for r in srv.requests if "Document 1." in r["messages"][-1]["content"])
        assert sent[1]["content"] == ("<DOCUMENT>\nDocument 1.\n</DOCUMENT>\n\n<QUESTION>\nQuestion 1?\n</QUESTION>\n\n"
                                      "<ANSWER>\nanswer 1\n</ANSWER>\n\nThink it through first, step by step, inside "
                                      "<THINKING></THINKING>. Then give your verdict as <RESPONSE>HALLUCINATION"
                                      "</RESPONSE> or <RESPONSE>NO HALLUCINATION</RESPONSE>.")
        custom = _ctx(tmp_path / "b", srv, ["llm_judge"], {})
        custom.config = custom.config.model_copy(update={"templates": RunConfig.model_validate(
            {"templates": {"faithfulness_system": {"path": str(system)}, "faithfulness_user": user}}).templates})
        recs = VerdictStage(custom).ensure(items)
        sent = next(r["messages"] for r in srv.requests if r["messages"][-1]["content"].startswith("Doc: Document 1."))
        assert sent == [{"role": "system", "content": "Judge strictly."},
                        {"role": "user", "content": "Doc: Document 1.\n<ANSWER>\nanswer 1\n</ANSWER>\nVerdict?"}]
        assert recs["d/x/1"]["asks"]["faithfulness"]["label"] == FAITHFUL
        assert VerdictStage(custom).key(items[0]) != VerdictStage(plain).key(items[0])
