"""A real `haldet run` of the embedded model writes its reports and cost columns; a rerun from the cache keeps the
costs the first run measured; `haldet report` rebuilds the same rows without touching the evidence."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

ARGS = ("run", "--limit", "12", "--max-new-tokens", "8", "--batch-size", "6", "--detector", "perplexity")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from conftest import run_cli

    out = tmp_path_factory.mktemp("e2e-report") / "run"
    first = run_cli(*ARGS, "--out", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    rows1 = json.loads((out / "results.json").read_text())
    second = run_cli(*ARGS, "--out", str(out))
    assert second.returncode == 0, second.stderr[-3000:]
    return out, rows1, json.loads((out / "results.json").read_text())


def test_run_writes_reports_and_costs(runs):
    out, rows, _ = runs
    for name in ("tables.md", "tables.tex", "report.html", "results.parquet"):
        assert (out / name).stat().st_size > 0, name
    for r in rows:
        assert r["evidence"] == "single-generation likelihood" and r["stages"] == "generate"
        assert r["gen_s_item"] > 0 and r["prep_s_item"] == 0 and r["extra_calls_item"] == 0
        assert r["cost_at_n"] == pytest.approx(r["fit_s"] + 100 * r["infer_s_item"])
    manifest = json.loads((out / "manifest.json").read_text())
    cell = manifest["cells"][0]
    assert cell["evidence"]["generate"]["seconds_source"] == "records"
    assert cell["detectors"][0]["key"] and cell["detectors"][0]["n_scored"] == rows[0]["n"]


def test_cached_rerun_keeps_measured_costs(runs):
    out, rows1, rows2 = runs
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["cells"][0]["detectors"][0]["cached"] is True
    assert [r["cost_at_n"] for r in rows2] == pytest.approx([r["cost_at_n"] for r in rows1])
    assert [r["gen_s_item"] for r in rows2] == pytest.approx([r["gen_s_item"] for r in rows1])


def test_report_command_rebuilds_without_recompute(runs, tmp_path):
    from conftest import run_cli

    out, _, rows = runs
    evidence = (out / "halueval_qa" / "smollm2-135m" / "generate.jsonl").read_bytes()
    proc = run_cli("report", str(out), "--out", str(tmp_path / "rep"), "--n-boot", "50")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rebuilt = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert [{k: v for k, v in r.items() if k != "run"} for r in rebuilt] == rows
    assert (out / "halueval_qa" / "smollm2-135m" / "generate.jsonl").read_bytes() == evidence
    assert "Loading weights" not in proc.stderr  # no model was loaded
