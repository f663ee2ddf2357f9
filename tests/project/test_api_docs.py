"""docs/api.md runs as written: its Python blocks execute in order in one namespace (in a temporary directory, on
the embedded SmolLM2-135M), its command line runs through the CLI on the same answers, and what they compute is
checked against known answers (perplexity from the stored token log-probs, AUROC from sklearn on the table)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from repo_paths import REPO

DOC = REPO / "docs" / "api.md"
# The walkthrough scores 50 answers (25 questions) and the config example runs 20 items; the suite's test-time
# budget allows one small run of the embedded model, so the same code runs on 6 questions and 2 items.
SMALLER = {"[:25]": "[:6]", "limit=20": "limit=2"}


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[str], Path]:
    """The doc's Python blocks run in order: (namespace, what each block printed, the directory they ran in)."""
    code = blocks("python")
    for old, new in SMALLER.items():
        assert sum(block.count(old) for block in code) == 1, f"docs/api.md no longer holds {old!r} once"
        code = [block.replace(old, new) for block in code]
    cwd = tmp_path_factory.mktemp("api_doc")
    namespace: dict[str, Any] = {"__name__": "api_doc"}
    printed = []
    with contextlib.chdir(cwd):
        for block in code:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(block, str(DOC), "exec"), namespace)  # the doc's own examples
            printed.append(out.getvalue())
    return namespace, printed, cwd


def test_walkthrough_scores_every_answer_and_shows_the_five_highest(doc: tuple[dict[str, Any], list[str], Path]):
    ns, printed, _ = doc
    table, top5 = ns["table"], ns["top5"]
    assert len(table) == 12 and table["perplexity"].notna().all()
    assert sorted(table["label"].tolist()) == [0] * 6 + [1] * 6
    assert top5["perplexity"].tolist() == sorted(table["perplexity"], reverse=True)[:5]
    assert all(response in printed[2] for response in top5["response"])


def test_perplexity_is_the_exponent_of_the_mean_token_surprisal(doc: tuple[dict[str, Any], list[str], Path]):
    ns, _, cwd = doc
    records = [json.loads(line) for line in (cwd / "runs/answers/responses/smollm2-135m/generate.jsonl").open()]
    expected = {r["id"]: math.exp(-float(np.mean(r["token_logprobs"]))) for r in records}
    got = dict(zip(ns["table"]["id"], ns["table"]["perplexity"], strict=True))
    assert got.keys() == expected.keys()
    assert all(r["provided"] for r in records)  # read teacher-forced, never generated
    assert all(math.isclose(got[i], expected[i], rel_tol=1e-9) for i in got)


def test_labelled_answers_get_auroc_with_its_interval(doc: tuple[dict[str, Any], list[str], Path]):
    ns, _, _ = doc
    table, results = ns["table"], ns["scored"].results
    auroc = results[results["metric"] == "auroc"].iloc[0]
    assert auroc["value"] == pytest.approx(roc_auc_score(table["label"], table["perplexity"]))
    assert auroc["n"] == 12 and auroc["ci_low"] <= auroc["value"] <= auroc["ci_high"]
    # AUROC, AUPR, FPR@95 and the rejection metrics (PRR over the full range and up to 50%, AURC)
    assert set(results["metric"]) == {"auroc", "aupr", "fpr95", "prr", "prr_50", "rej_auc", "aurc"}


def test_a_missing_column_is_named_with_the_accepted_names(doc: tuple[dict[str, Any], list[str], Path]):
    _, printed, cwd = doc
    message = printed[4]
    assert "missing column for the response (accepted names: response, answer" in message
    assert "reply" in message and "score_responses(data=...)" in message
    assert not (cwd / "runs/bad").exists()  # refused before any work: no run directory


def test_load_run_reads_back_what_the_call_returned(doc: tuple[dict[str, Any], list[str], Path]):
    ns, printed, _ = doc
    run, scored = ns["run"], ns["scored"]
    assert run.table().equals(scored.table())
    assert set(run.scores["split"]) == {"test"} and set(run.scores["unit"]) == {0}
    assert "['data']" in printed[6]


def test_the_config_example_returns_the_stored_rows(doc: tuple[dict[str, Any], list[str], Path]):
    ns, _, _ = doc
    frame = ns["frame"]
    assert len(frame) == len(ns["rows"]) and frame.to_dict("records") == ns["rows"]
    # 2 items (the doc's 20 alike) are too few to rank detectors: every row's note carries the caveat
    assert all(str(r["note"]).startswith("thin test split") for r in ns["rows"])


def test_the_command_line_scores_the_same_file_like_the_api(doc: tuple[dict[str, Any], list[str], Path]):
    from typer.testing import CliRunner

    from haldet.cli import app
    from haldet.report.frames import load_frames

    ns, _, cwd = doc
    (command,) = blocks("bash")
    args = shlex.split(command.split("#")[0])[1:]
    with contextlib.chdir(cwd):
        result = CliRunner().invoke(app, [*args, "--limit", "4"])  # 4 of the 12 answers: the test-time budget
        # those 4 are all correct answers: scored, but no metric is defined, which the run says and exits 1 for
        assert result.exit_code == 1, result.output
        assert "all one class (0 positive of 4)" in " ".join(result.output.split())
        cli = load_frames(cwd / "runs/answers_cli").table()
    assert "perplexity (response level): 4 responses scored" in result.output
    assert "report.html" in result.output and (cwd / "runs/answers_cli/results.json").exists()  # like any run
    api = ns["table"].set_index("response")["perplexity"]
    # equal up to float32 batch padding (the CLI read 4 answers per batch in another grouping)
    pairs = list(zip(cli["response"], cli["perplexity"], strict=True))
    assert len(pairs) == 4 and all(math.isclose(v, api[r], rel_tol=1e-4) for r, v in pairs)
    assert cli["likelihood"].notna().all()
