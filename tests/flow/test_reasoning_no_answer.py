"""An output cut off inside its reasoning has no answer: labelled invalid by no judge ("no-answer"), never scored
(NaN with the reason, whatever the detector would make of an empty answer), counted per cell in the result rows and
under the run's table with the limit to raise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import haldet.flow.cell
from haldet.backends.base import Backend, GenOutput, role_based_chat
from haldet.cli import app
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"


class ThinkingBackend(Backend):
    """A scripted reasoning model: thinks, then answers "#### 10"; the second prompt is cut off while thinking."""

    kind = "scripted"

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        return role_based_chat(messages)

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]:
        outs = []
        for k, _ in enumerate(prompts):
            cut = k == 1
            extra = {"reasoning": "ten apples, so", "reasoning_ids": [7, 8, 9], "reasoning_logprobs": [-1.0] * 3,
                     "reasoning_span": [0, 2], "answer_tokens": [3, 3] if cut else [3, 6],
                     "no_answer": "no answer: the model stopped inside its reasoning without closing it" if cut
                     else None}
            outs.append(GenOutput(text="" if cut else "#### 10", token_ids=[] if cut else [1, 2, 3],
                                  token_logprobs=[] if cut else [-0.1, -0.2, -0.3],
                                  finish_reason="length" if cut else "stop", extra=extra))
        return outs


def test_a_cut_off_reasoning_is_counted_never_labelled_or_scored(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setattr(haldet.flow.cell, "make_backend", lambda model, config: ThinkingBackend(model))
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["run", "--dataset", "gsm8k", "--data-dir", str(FIX), "--limit", "3",
                                      "--detector", "perplexity", "--out", str(out), "--min-per-class", "0",
                                      "--allow-failures"])
    text = " ".join(result.output.split())
    assert result.exit_code == 0, text
    assert ("no answer gsm8k | smollm2-135m: 1/3 output(s) were cut off inside their reasoning (labelled invalid, "
            "never scored); raise generation.max_new_tokens_by_task.reasoning") in text
    gen = {r["id"]: r for r in _records(out, "generate.jsonl")}
    cut = [r for r in gen.values() if r["no_answer"]]
    assert len(cut) == 1 and cut[0]["reasoning"] == "ten apples, so" and cut[0]["answer_tokens"] == [3, 3]
    labels = {r["id"]: r for r in _records(out, "annotate.jsonl")}
    assert labels[cut[0]["id"]]["category"] == "invalid" and labels[cut[0]["id"]]["judge"] == "no-answer"
    assert all(labels[i]["judge"] == "rule:math" for i in gen if i != cut[0]["id"])
    rows = json.loads((out / "results.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert rows and all(r["no_answer"] == 1 for r in rows)


def test_scoring_never_scores_an_output_without_an_answer() -> None:
    from haldet.detectors.base import UnitScores
    from haldet.flow.scoring import skipped_reasons
    from haldet.schema import Generation
    from haldet.signals import SignalView

    gens = [Generation(id="d/s/0", prompt="p", response="", token_ids=[], token_logprobs=[], finish_reason="length",
                       n_tokens=0, model="m", reasoning="hmm", no_answer="no answer: cut off"),
            Generation(id="d/s/1", prompt="p", response="x", token_ids=[1], token_logprobs=[-0.5],
                       finish_reason="stop", n_tokens=1, model="m")]
    view = SignalView(ids=["d/s/0", "d/s/1"], instances=[], generations=gens, loader=lambda s, i: [])
    # a detector that scores an empty answer 0.0: the scoring path makes it NaN with the reason
    scores = skipped_reasons(view, UnitScores([np.array([0.0]), np.array([0.5])], [[""], [""]]))
    assert np.isnan(scores.values[0][0]) and scores.reasons[0] == ["no answer: cut off"]
    assert scores.values[1][0] == 0.5
    # reading the reasoning: the cut-off output's reasoning is there; an output without one is NaN
    seen = skipped_reasons(view.reading("reasoning"), UnitScores([np.array([0.2]), np.array([0.5])], [[""], [""]]))
    assert seen.values[0][0] == 0.2 and np.isnan(seen.values[1][0]) and "no reasoning" in seen.reasons[1][0]


def _records(run: Path, name: str) -> list[dict[str, Any]]:
    (path,) = list(run.glob(f"*/*/{name}"))
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_run_on_a_reasoning_endpoint_stores_reasoning_and_answer_apart(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """`openai:NAME` served by the mock endpoint speaking the reasoning format (a separate `reasoning_content`):
    answers and samples are the content, the reasoning is stored beside them, and the detectors read the answers."""
    from mock_openai import FakeOpenAI, text_content

    monkeypatch.setenv("MOCK_KEY", "x")
    with FakeOpenAI(content=text_content, default="ok:#### 10") as srv:
        srv.reasoning = "Ten apples in all."
        out = tmp_path / "r"
        (tmp_path / "c.yaml").write_text("sample: {k: 2}\nendpoint: {api_key_env: MOCK_KEY, retries: 0}\n")
        result = CliRunner().invoke(app, ["run", "--dataset", "gsm8k", "--data-dir", str(FIX), "--limit", "3",
                                          "--model", "openai:mock", "--model-base-url", srv.base_url,
                                          "--detector", "perplexity,lexical_similarity", "--out", str(out),
                                          "--min-per-class", "0", "--allow-failures",
                                          "--config", str(tmp_path / "c.yaml")])
    assert result.exit_code == 0, result.output
    gen = _records(out, "generate.jsonl")
    assert all(r["response"] == "#### 10" and r["reasoning"] == "Ten apples in all." for r in gen)
    samples = _records(out, "sample.jsonl")
    assert all(s["samples"] == ["#### 10", "#### 10"] and s["reasoning"] == ["Ten apples in all."] * 2
               for s in samples)
    scores = {p.stem: [json.loads(x) for x in p.read_text().splitlines()] for p in out.glob("*/*/scores/*.jsonl")}
    assert all(r["value"] == pytest.approx(0.0) for r in scores["lexical_similarity"])  # identical answers
