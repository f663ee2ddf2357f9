"""TRIVIA+'s LLM judges read articles fitted to their own window (`verdict.context_window`), not the detectors'
model's; what the judge read is in the verdict key, and the default leaves the judge's input and keys as before."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from haldet.config import RunConfig
from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.flow.scoring import make_detector
from haldet.schema import Generation, Instance
from haldet.stages.base import CellContext, Item
from haldet.stages.verdict import VerdictStage
from haldet.stages.verdict_prompts import JUDGE_CONTEXT
from haldet.store import RunStore
from haldet.suites.base import get_suite
from mock_openai import FakeOpenAI, text_content
from repo_paths import FIXTURES

FIXTURE = FIXTURES / "datasets" / "triviaplus" / "triviaplus_fixture.parquet"
F = "<THINKING>Supported.</THINKING> <RESPONSE>NO HALLUCINATION</RESPONSE>"


class _Words:
    """A backend as the long-context policy sees it: a 400-token window, one token per word."""

    def window(self) -> int:
        return 400

    def encode_text(self, text: str) -> list[int]:
        return [0] * len(text.split())


@functools.cache
def _loaded() -> tuple[Instance, ...]:
    items, _ = get_adapter("triviaplus", FIXTURE, None).load(limit=None)
    return tuple(i for i in items if len(i.context.split()) > 300)[:2]


def _long_items() -> list[Instance]:
    return list(_loaded())


def _config(**verdict: Any) -> RunConfig:
    return RunConfig(suite="triviaplus", detectors=["llm_judge"],
                     suite_params={"triviaplus": {"context_tokens": 60}},
                     verdict={"model": "judge-x", "retries": 0, "backoff": 0, "timeout": 5, **verdict})


def _prepared(**verdict: Any) -> list[Instance]:
    return get_suite("triviaplus").prepare_instances(_long_items(), _Words(), _config(**verdict))


def test_judge_window_fits_the_full_article_apart_from_the_proxy_fit() -> None:
    originals = _long_items()
    default = _prepared()
    assert all(JUDGE_CONTEXT not in i.meta for i in default)  # the default: the judge reads the proxy's fit
    wide = _prepared(context_window=100_000)
    for orig, item in zip(originals, wide, strict=True):
        assert len(item.context.split()) <= 60  # the detectors' model's fit is unchanged
        assert item.meta[JUDGE_CONTEXT] == orig.context  # the whole article fits the judge's window
        assert item.meta["judge_long_context"]["truncated"] is False
    # 700 words of window less a 256-token reply and 256 for the wording: at most 188 words of article (less Q and A)
    narrow = _prepared(context_window=700, max_new_tokens=256)
    for item in narrow:
        words = len(item.meta[JUDGE_CONTEXT].split())
        assert 60 < words <= 188 and item.meta["judge_long_context"]["truncated"]
    chars = _prepared(context_window=6000, context_unit="chars", max_new_tokens=256)  # 6000 - 4*256 - 4*256
    assert all(len(i.meta[JUDGE_CONTEXT]) <= 6000 - 2048 for i in chars)
    assert all(i.meta["judge_long_context"]["unit"] == "chars" for i in chars)
    with pytest.raises(HaldetError, match=r"window leaves no room"):
        _prepared(context_window=400, max_new_tokens=300)


def _asked(tmp: Path, items: list[Instance], srv: FakeOpenAI, config: RunConfig) -> tuple[VerdictStage, list[Item]]:
    config = config.model_copy(update={"verdict": config.verdict.model_copy(update={"base_url": srv.base_url})})
    ctx = CellContext(config=config, dataset="triviaplus", model="m", store=RunStore(tmp).cell("triviaplus", "m"),
                      backend_factory=lambda: (_ for _ in ()).throw(AssertionError("no local backend")),
                      detectors=[make_detector("llm_judge", config)])
    work = [Item(instance=i, prompt=f"{i.context}\n{i.question}",
                 generation=Generation(id=i.id, prompt="p", response=i.response or "", token_ids=[],
                                       token_logprobs=[], finish_reason="provided", n_tokens=0, model="m"))
            for i in items]
    stage = VerdictStage(ctx)
    stage.ensure(work)
    return stage, work


def test_the_judge_is_sent_its_own_fit_and_a_changed_window_changes_the_key(tmp_path: Path) -> None:
    with FakeOpenAI(content=text_content, default=f"ok:{F}") as srv:
        wide_items = _prepared(context_window=100_000)
        wide, wide_work = _asked(tmp_path / "wide", wide_items, srv, _config(context_window=100_000))
        sent = [m["content"] for r in srv.requests for m in r["messages"] if m["role"] == "user"]
        assert all(any(i.meta[JUDGE_CONTEXT] in s for s in sent) for i in wide_items)  # the whole article was sent
        narrow_items = _prepared(context_window=700, max_new_tokens=256)
        narrow, narrow_work = _asked(tmp_path / "wide", narrow_items, srv,
                                     _config(context_window=700, max_new_tokens=256))
        # same run dir, same reply budget in both keys but for the window: only what the judge read differs
        same_budget = _prepared(context_window=700, max_new_tokens=384)
        assert same_budget[0].meta[JUDGE_CONTEXT] != wide_items[0].meta[JUDGE_CONTEXT]
        n = len(srv.requests)
        again, again_work = _asked(tmp_path / "wide", same_budget, srv, _config(context_window=100_000))
        assert len(srv.requests) > n  # another window's fit: asked anew, never the wide verdicts reused
        assert again.key(again_work[0]) != wide.key(wide_work[0])
        assert narrow.key(narrow_work[0]) != wide.key(wide_work[0])
