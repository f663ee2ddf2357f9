"""The reasoning-trace study: `NAME@VIEW` rows (a detector reading the answer, the reasoning, all of it, or the trace
under the `remove` / `force` controls) in one run's table, each under its own score log and identity."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_reasoning_no_answer import FIX, ThinkingBackend
from typer.testing import CliRunner

import haldet.flow.cell
from haldet.cli import app
from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError
from haldet.schema import Generation
from haldet.signals import FORCED_ANSWER, SampleTexts, Signal, SignalView, without_answer


def test_a_run_gives_each_view_its_own_row(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(haldet.flow.cell, "make_backend", lambda model, config: ThinkingBackend(model))
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["run", "--dataset", "gsm8k", "--data-dir", str(FIX), "--limit", "3",
                                      "--detector", "perplexity,perplexity@reasoning,perplexity@all", "--out",
                                      str(out), "--min-per-class", "0", "--allow-failures"])
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "results.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert {r["detector"] for r in rows} == {"perplexity", "perplexity@reasoning", "perplexity@all"}
    scores = {p.stem: [json.loads(x) for x in p.read_text().splitlines()] for p in out.glob("*/*/scores/*.jsonl")}
    assert set(scores) == {"perplexity", "perplexity@reasoning", "perplexity@all"}
    # the scripted reasoning has log-probs -1 (its span holds 2 of them), the answer -0.1, -0.2, -0.3
    by = {name: {r["id"]: r["value"] for r in recs} for name, recs in scores.items()}
    some = next(i for i, v in by["perplexity"].items() if v is not None)
    assert by["perplexity"][some] == pytest.approx(np.exp(0.2))
    assert by["perplexity@reasoning"][some] == pytest.approx(np.exp(1.0))
    assert by["perplexity@all"][some] == pytest.approx(np.exp((3.0 + 0.6) / 6))


def test_views_and_controls_of_the_trace() -> None:
    assert DETECTORS.get("lexical_similarity@remove")().reads == "remove"
    assert "perplexity@force" in DETECTORS and "perplexity@trace" not in DETECTORS
    with pytest.raises(HaldetError, match="not a view"):
        DETECTORS.get("perplexity@trace")
    with pytest.raises(ValueError, match="token_logprobs"):  # the controls are text views
        DETECTORS.get("perplexity@remove")()
    assert without_answer("So it is Canberra. canberra, yes", "Canberra.") == "So it is . , yes"
    g = Generation(id="d/s/1", prompt="p", response="Canberra.", token_ids=[], token_logprobs=[],
                   finish_reason="stop", n_tokens=0, model="m", reasoning="Not Sydney but Canberra.")
    view = SignalView(ids=["d/s/1"], instances=[], generations=[g],
                      loader=lambda s, i: [SampleTexts(["Canberra.", "Sydney."], ["so Canberra", "so Sydney"])])
    assert view.reading("remove").get(Signal.RESPONSE) == ["Not Sydney but ."]
    assert view.reading("force").get(Signal.RESPONSE) == [f"Not Sydney but Canberra.\n\n{FORCED_ANSWER}"]
    assert view.reading("remove").get(Signal.SAMPLES) == [["so", "so"]]
    assert view.reading("force").get(Signal.SAMPLES) == [[f"so Canberra\n\n{FORCED_ANSWER}",
                                                          f"so Sydney\n\n{FORCED_ANSWER}"]]
