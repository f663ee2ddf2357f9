"""The VeriGray 7-way classifier and TRIVIA+'s judges (zero-shot and few-shot LLM-as-a-judge) end to end through a
reasoning endpoint (the mock in OpenAI reasoning mode: it refuses temperature, top_p and max_tokens, and sends each
reply's thinking in a separate field) with `verdict.params` declared: the verdict stage asks with the declared
parameters and the reply budget sized for a reasoning model, reads the answers past the thinking, and the detectors
score them through the one scoring path. Negative control: the same run without the declaration is refused with
the one message naming the setting to change."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.flow.scoring import make_detector
from haldet.schema import Category, Generation, Instance, SpanLabel
from haldet.signals import SignalView
from haldet.stages.base import CellContext, Item
from haldet.stages.loader import EvidenceLoader
from haldet.stages.verdict import VerdictStage
from haldet.store import RunStore
from haldet.suites.verigray.labels import FABRICATED
from mock_openai import FakeOpenAI, text_content

H = "<RESPONSE>HALLUCINATION</RESPONSE>"
F = "<RESPONSE>NO HALLUCINATION</RESPONSE>"
PARAMS = {"temperature": False, "top_p": False, "max_tokens_field": "max_completion_tokens",
          "reasoning_effort": "low"}
DETECTORS = ["verigray_llm", "llm_judge", "llm_judge_fs"]
SENTENCES = ["Ada was born in 1815.", "She built the engine."]


def _key(body: dict[str, Any]) -> str:
    """A TRIVIA+ judge's request by its answer, a 7-way request by its sentence (the prompt's last line)."""
    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    match = re.search(r"<ANSWER>\n(.*?)\n</ANSWER>", user, re.S)
    return f"judge|{match.group(1)}" if match else f"7-way|{user.strip().splitlines()[-1]}"


def _items() -> list[Item]:
    items = []
    for i in range(4):
        response = " ".join(SENTENCES) if i % 2 else SENTENCES[0]
        units = [SpanLabel(kind="sentence", start=response.index(s), end=response.index(s) + len(s), text=s,
                           category=Category.CORRECT) for s in SENTENCES if s in response]
        inst = Instance(id=f"vg/x/{i}", dataset="vg", scenario="summarization", task_type="summarization",
                        context="Ada Lovelace was born in 1815. She wrote about the engine.", question="Summarise.",
                        response=response, units=units)
        gen = Generation(id=inst.id, prompt="p", response=response, token_ids=[], token_logprobs=[],
                         finish_reason="provided", n_tokens=0, model="m", provided=True)
        items.append(Item(instance=inst, prompt="p", generation=gen))
    return items


def _ctx(tmp: Path, srv: FakeOpenAI, params: dict[str, Any] | None) -> CellContext:
    verdict = {"model": "o-judge", "base_url": srv.base_url, "retries": 0, "backoff": 0, "timeout": 5,
               **({"params": params} if params else {})}
    config = RunConfig(detectors=DETECTORS, detector_params={"llm_judge_fs": {"shots": 1}}, verdict=verdict)
    ctx = CellContext(config=config, dataset="vg", model="m", store=RunStore(tmp).cell("vg", "m"),
                      backend_factory=lambda: (_ for _ in ()).throw(AssertionError("no local backend")),
                      detectors=[make_detector(name, config) for name in DETECTORS])
    ctx.split = {"train": ["vg/x/0", "vg/x/1"], "val": [], "test": ["vg/x/2", "vg/x/3"]}
    ctx.labels = {"vg/x/0": 0, "vg/x/1": 1}
    return ctx


def test_classifier_and_judges_through_a_reasoning_endpoint(tmp_path: Path) -> None:
    items = _items()
    with FakeOpenAI(content=text_content, key_of=_key, default=f"ok:{F}") as srv:
        srv.reasoning_endpoint = True
        srv.plans[f"7-way|{SENTENCES[0]}"] = ["ok:Option: A"]  # Explicitly-Supported
        srv.plans[f"7-way|{SENTENCES[1]}"] = ["ok:Option: D"]  # Fabricated
        srv.plans[f"judge|{' '.join(SENTENCES)}"] = [f"ok:{H}"]
        ctx = _ctx(tmp_path, srv, PARAMS)
        VerdictStage(ctx).ensure(items)
        requests = list(srv.requests)
    assert len(requests) == 4 + (1 + 2 + 1 + 2) + 4  # zero-shot judge, 7-way per sentence, few-shot judge
    for body in requests:  # as declared: no temperature / top_p / max_tokens, the reasoning budget, the effort
        assert not {"temperature", "top_p", "max_tokens"} & set(body)
        assert body["max_completion_tokens"] == 4096 and body["reasoning_effort"] == "low"
    view = SignalView(ids=[i.id for i in items], instances=[i.instance for i in items],
                      generations=[i.generation for i in items if i.generation], loader=EvidenceLoader(ctx, items))
    judge, few = (make_detector(name, ctx.config) for name in ("llm_judge", "llm_judge_fs"))
    np.testing.assert_array_equal(judge.score(view).values, [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(few.score(view).values, [0.0, 1.0, 0.0, 1.0])
    seven = make_detector("verigray_llm", ctx.config)
    units = seven.score_units(view, "sentence").values
    made_up = 6.0 - FABRICATED  # score = 6 - the class's degree: A (Explicitly-Supported) 0, D (Fabricated)
    assert [list(u) for u in units] == [[0.0], [0.0, made_up], [0.0], [0.0, made_up]] and made_up > 1
    assert list(seven.score(view).values) == [0.0, made_up, 0.0, made_up]  # the least faithful sentence


def test_without_the_declaration_the_refused_parameter_is_named(tmp_path: Path) -> None:
    with FakeOpenAI(content=text_content, key_of=_key, default=f"ok:{F}") as srv:
        srv.reasoning_endpoint = True
        with pytest.raises(HaldetError, match="refused the parameter `temperature`") as exc:
            VerdictStage(_ctx(tmp_path, srv, None)).ensure(_items())
    assert "verdict.params.temperature: false" in exc.value.hint
