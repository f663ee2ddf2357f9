"""A run without --out never loses another run's results (issue 32, point 1): the default settings of some datasets
and models have `runs/<datasets>__<models>`, any other config a folder of its own named by what it changes; and the
fit/score seconds of cached scores stay with those scores, whichever run (and manifest) reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from haldet.cli import app
from haldet.cli.run import RunOptions, default_out, run_config


def _out(**flags: Any) -> str:
    return str(default_out(run_config(RunOptions(**flags))))


def test_the_default_config_has_the_plain_name_and_any_other_its_own() -> None:
    assert _out() == "runs/halueval_qa__smollm2-135m"
    assert _out(dataset=["halueval_dialogue"]) == "runs/halueval_dialogue__smollm2-135m"  # defaults of that dataset
    quick = _out(limit=20, detector=["perplexity"])
    assert quick == "runs/halueval_qa__smollm2-135m__detectors-perplexity_limit-20"
    assert _out(limit=20, detector=["perplexity"]) == quick  # the same command finds its own cache again
    assert _out(limit=20, detector=["perplexity", "ln_entropy"]) == \
        "runs/halueval_qa__smollm2-135m__detectors-perplexity+ln_entropy_limit-20"
    assert _out(judge_model="gpt-4o-mini") == "runs/halueval_qa__smollm2-135m__judge.model-gpt-4o-mini"
    # what a folder name cannot say exactly (a path, per-dataset options) gets a hash: other data, other folder
    one, two = _out(data_dir=Path("/data/a/x")), _out(data_dir=Path("/data/b/x"))
    assert one.startswith("runs/halueval_qa__smollm2-135m__data_dir-x-") and one != two


ARGS = ("run", "--max-new-tokens", "16", "--detector", "perplexity", "--min-per-class", "0")  # tiny: not thin
DEFAULT = (*ARGS, "--limit", "8")  # the default run's stand-in
QUICK = (*ARGS, "--limit", "4")    # the README's one-minute look: fewer items


def _run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output[-3000:]
    return " ".join(result.output.split())


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "results.json").read_text())


@pytest.mark.slow
def test_a_quick_look_keeps_the_default_runs_results_and_costs(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    main = Path(_out(max_new_tokens=16, detector=["perplexity"], limit=8, min_per_class=0))
    quick = Path(_out(max_new_tokens=16, detector=["perplexity"], limit=4, min_per_class=0))
    assert main != quick
    first = _run(*DEFAULT)
    assert f"run directory: {main}" in first
    before = _rows(main)
    assert {r["n"] for r in before} == {2} and all(r["score_s"] > 0 and "cost_note" not in r for r in before)

    look = _run(*QUICK)  # no --out: a folder of its own, printed before the work and after it
    assert f"run directory: {quick}" in look
    assert {r["n"] for r in _rows(quick)} == {1}
    assert _rows(main) == before

    # --update into the main folder on purpose: its manifest then holds only the look's scores (other items, other
    # key); the rerun of the main command reads its own scores from the cache with the seconds they took, so every
    # cost column comes back
    _run(*QUICK, "--out", str(main), "--update")
    assert {r["n"] for r in _rows(main)} == {1}
    again = _run(*DEFAULT)
    assert "recorded no fit/score timings" not in again
    assert _rows(main) == before
