"""The endpoint fact checker (`openai:` MiniCheck, haldet.models.pairs.support) takes `params` like every role that
asks an endpoint: its requests carry what is declared, the declaration is in its identity (and the pair cache's id),
none declared keeps the identity it had, and a parameter the server refuses is one error naming the setting. The
mock OpenAI endpoint runs in reasoning mode (refuses temperature, top_p and max_tokens)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from haldet.errors import HaldetError
from haldet.schema import Category, Generation, Instance, SpanLabel
from haldet.signals import SignalView
from haldet.suites.verigray.minicheck import MiniCheck
from mock_openai import FakeOpenAI, text_content

ID = "verigray/test/p"
DOC = "Ada Lovelace was born in 1815."
CLAIM = "Ada was born in 1815."
REASONING = {"temperature": False, "top_p": False, "max_tokens_field": "max_completion_tokens"}


def _view() -> SignalView:
    inst = Instance(id=ID, dataset="verigray", scenario="summarization", task_type="summarization",
                    question="Summarise.", context=DOC, response=CLAIM,
                    units=[SpanLabel(kind="sentence", start=0, end=len(CLAIM), text=CLAIM,
                                     category=Category.CORRECT)])
    gen = Generation(id=ID, prompt="", response=CLAIM, token_ids=[], token_logprobs=[], finish_reason="stop",
                     n_tokens=0, model="given")
    return SignalView(ids=[ID], instances=[inst], generations=[gen], loader=lambda sig, ids: [CLAIM])


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(content=text_content, key_of=lambda body: "pair", default="ok:Yes") as srv:
        srv.reasoning_endpoint = True
        srv.top_first["pair"] = {"Yes": math.log(0.75), "No": math.log(0.25)}
        yield srv


def test_declared_params_shape_the_checkers_requests_and_key_it(server: FakeOpenAI, tmp_path) -> None:
    det = MiniCheck(checker="openai:mc", base_url=server.base_url, retries=0, params=REASONING)
    det.workdir = tmp_path
    assert det.score(_view()).values[0] == pytest.approx(0.25)  # 1 - P(Yes) / (P(Yes) + P(No))
    body = server.requests[0]
    assert body["max_completion_tokens"] == 1 and "max_tokens" not in body and "temperature" not in body
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    assert det.identity()["params"]["params"] == REASONING
    assert det.meta["checker"]["used"].endswith('|params={"max_tokens_field": "max_completion_tokens", '
                                                '"temperature": false, "top_p": false}')
    plain = MiniCheck(checker="openai:mc", base_url=server.base_url)
    assert "params" not in plain.identity()["params"]  # no declaration: the identity it had before


def test_a_refused_parameter_is_one_error_naming_the_setting(server: FakeOpenAI) -> None:
    det = MiniCheck(checker="openai:mc", base_url=server.base_url, retries=0)  # sends temperature and max_tokens
    with pytest.raises(HaldetError, match="refused the parameter") as exc:
        det.score(_view())
    assert "detector_params.minicheck.params." in exc.value.hint and "run again" in exc.value.hint
    with pytest.raises(HaldetError, match="bad request parameters") as bad:
        MiniCheck(checker="openai:mc", base_url=server.base_url, params={"temprature": False})
    assert bad.value.where == "detector_params.minicheck.params"
