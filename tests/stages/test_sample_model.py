"""`sample.model`: SelfCheck-style samples drawn by another model than the cell's (TRIVIA+ sampled GPT-4-mini and
Claude), here an OpenAI-compatible endpoint (the mock), rendered with its own chat format and keyed by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from haldet.backends.base import Backend, role_based_chat
from haldet.backends.select import check_signals
from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.flow.cell import prepare_cell
from haldet.signals import Signal
from haldet.stages.sample import SampleStage
from haldet.store import RunStore
from haldet.text.prompts import PromptBuilder
from mock_openai import FakeOpenAI, text_content


class RoleChat(Backend):
    """The cell's model: renders prompts only (it never samples here)."""

    kind = "test"

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        return role_based_chat(messages)

    def fingerprint(self) -> str:
        return "role-chat"


def _cell(tmp_path: Path, sample: dict[str, object]):
    config = RunConfig(datasets=["halueval_qa"], models=["role"], limit=3, sample=sample,
                       detectors=["lexical_similarity"])
    _, ctx, items = prepare_cell(config, RunStore(tmp_path / "run"), "halueval_qa", "role",
                                 lambda d, t: (lambda n: None), {"role": RoleChat("role")})
    return ctx, items


def test_samples_come_from_the_named_endpoint_model_in_its_own_chat_format(tmp_path: Path) -> None:
    with FakeOpenAI(content=text_content, default="ok:Paris|London") as srv:
        ctx, items = _cell(tmp_path, {"model": "openai:sampler-x", "base_url": srv.base_url, "k": 2})
        records = SampleStage(ctx).ensure(items)
        asked = list(srv.requests)
    assert len(records) == 3
    for item in items:
        rec = records[item.id]
        assert rec["sample_model"] == "openai:sampler-x" and sorted(rec["samples"]) == ["London", "Paris"]
        assert rec["hidden_layer"] is None  # an endpoint has no hidden states: never asked for
    # the endpoint got the item's chat messages, not the cell model's rendered prompt text
    assert {b["model"] for b in asked} == {"sampler-x"}
    builder = PromptBuilder(ctx.config.prompt, ctx.config.templates)
    assert {json.dumps(b["messages"]) for b in asked} == {json.dumps(builder.messages(i.instance)) for i in items}
    # the sampling model keys the records: the cell's own samples would be another key
    own_ctx, _ = _cell(tmp_path / "own", {"k": 2})
    stage, own = SampleStage(ctx), SampleStage(own_ctx)
    assert stage.key(items[0]) != own.key(items[0])
    log = [json.loads(line) for line in (tmp_path / "run" / "halueval_qa" / "role" / "sample.jsonl").open()]
    assert {r["sample_model"] for r in log} == {"openai:sampler-x"}


def test_an_endpoint_sample_model_without_a_key_fails_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    config = RunConfig(models=["smollm2-135m"],
                       sample={"model": "openai:gpt-4o-mini", "api_key_env": "NO_SUCH_KEY_VAR"})
    with pytest.raises(HaldetError, match="NO_SUCH_KEY_VAR") as err:
        check_signals(config, {"lexical_similarity": frozenset({Signal.SAMPLES})}, {})
    assert err.value.where == "sample.model"
    # detectors that read no samples never ask for the sampler's key
    check_signals(config, {"perplexity": frozenset({Signal.TOKEN_LOGPROBS})}, {})
