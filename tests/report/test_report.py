"""Reports rebuilt from the stored fixture run (a real smollm2-135m run, trimmed): files, contents, no recompute."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from haldet.cli import app
from haldet.evaluation.metrics import auroc
from haldet.report.build import report_runs
from haldet.report.rundata import load_run
from haldet.store import RunStore
from repo_paths import FIXTURES

FIXTURE = FIXTURES / "run_fixture"


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    before = _tree_digest(FIXTURE)
    written, rows = report_runs([FIXTURE], out, n_boot=200)
    assert _tree_digest(FIXTURE) == before  # reporting never writes into (or recomputes) the run
    return out, written, rows


def test_all_files_written(built):
    out, written, rows = built
    figures = {f"figures/{kind}-{cell}.{fmt}" for kind, cell in [("heatmap", "smollm2-135m"), ("cost", "smollm2-135m"),
                                                                 ("roc", "halueval_qa-smollm2-135m"),
                                                                 ("pr", "halueval_qa-smollm2-135m")]
               for fmt in ("pdf", "png")}  # triviaqa has no cached test scores in the fixture: no curves
    assert set(written) == {"results.json", "results.csv", "results.parquet", "tables.md", "tables.tex",
                            "report.html", *figures}
    assert all(written[n] == out / n and written[n].stat().st_size > 1000 for n in figures)
    stored = json.loads((FIXTURE / "results.json").read_text())
    assert len(rows) == len(stored) > 0
    table = pq.read_table(out / "results.parquet").to_pylist()
    assert len(table) == len(stored)
    assert {r["metric"] for r in table} == {"auroc", "aupr", "fpr95"}
    for col in ("dataset", "scenario", "model", "detector", "family", "metric", "value", "ci_low", "ci_high", "n",
                "n_pos", "coverage", "cost_at_n", "extra_calls_item", "infer_s_item"):
        assert col in table[0], col


def test_tables_contain_every_detector_and_dataset(built):
    out, _, rows = built
    md, tex = (out / "tables.md").read_text(), (out / "tables.tex").read_text()
    for det in {r["detector"] for r in rows}:
        assert det in md and det.replace("_", r"\_") in tex
    for ds in {r["dataset"] for r in rows}:
        assert ds.replace("_", r"\_") in tex
    assert "Family Avg." in md and "Overall" in md and r"\toprule" in tex and "Cost@100" in md


def test_html_sections_and_roc_match_stored_auroc(built):
    out, _, rows = built
    html = (out / "report.html").read_text()
    for marker in ("id=summary", "id=results", "id=scenarios", "id=cost", "id=roc", "id=metadata",
                   "AUROC vs Cost@100", "log scale", "true-positive rate"):
        assert marker in html, marker
    run = load_run(FIXTURE)
    assert run.manifest["config_hash"] in html
    # the ROC data the report reads give back exactly the AUROC stored in results.json
    checked = 0
    for row in rows:
        if row["metric"] != "auroc" or row["value"] is None:
            continue
        cell = run.cell_scores(row["dataset"], row["model"], [row["detector"]])
        assert cell is not None
        s = cell.scores[row["detector"]]
        ok = np.isfinite(s)
        assert int(ok.sum()) == row["n"] and int(cell.labels[ok].sum()) == row["n_pos"]
        assert auroc(cell.labels[ok], s[ok]) == pytest.approx(row["value"], abs=1e-12)
        checked += 1
    assert checked >= 2


def test_failed_cell_is_listed(built):
    out, _, _ = built
    failed = [c for c in load_run(FIXTURE).cells() if c.get("error")]
    html = (out / "report.html").read_text()
    assert failed, "the fixture holds one failed cell (a dataset with no offline data)"
    for c in failed:
        assert f"cell {c['dataset']} | {c['model']} failed" in html


def test_cli_report_merges_runs_later_wins(tmp_path):
    second = tmp_path / "second"
    shutil.copytree(FIXTURE, second)
    rows = json.loads((second / "results.json").read_text())
    target = next(r for r in rows if r["metric"] == "auroc" and r["value"] is not None)
    target["value"] = 0.123456
    (second / "results.json").write_text(json.dumps(rows))
    out = tmp_path / "merged"
    res = CliRunner().invoke(app, ["report", str(FIXTURE), str(second), "--out", str(out), "--n-boot", "50",
                                   "--json"])
    assert res.exit_code == 0, res.output
    merged = json.loads((out / "results.json").read_text())
    assert len(merged) == len(rows)
    hit = next(r for r in merged if all(r[k] == target[k] for k in ("dataset", "model", "detector", "metric")))
    assert hit["value"] == 0.123456 and hit["run"] == "second"


def test_cli_report_needs_out_for_several_runs(tmp_path):
    res = CliRunner().invoke(app, ["report", str(FIXTURE), str(FIXTURE)])
    assert res.exit_code != 0


def test_cli_compare_paired(tmp_path):
    run = load_run(FIXTURE)
    dets = list(dict.fromkeys(r["detector"] for r in run.rows if r["value"] is not None))
    res = CliRunner().invoke(app, ["compare", str(FIXTURE), dets[0], dets[1], "--n-boot", "100", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out and all(r["a"] == dets[0] and r["b"] == dets[1] for r in out)
    first = out[0]
    rows = {(r["dataset"], r["detector"]): r["value"] for r in run.rows if r["metric"] == "auroc"}
    if first["n_dropped"] == 0 and first["diff"] is not None:
        assert first["auroc_a"] == pytest.approx(rows[(first["dataset"], dets[0])], abs=1e-12)
        assert first["diff"] == pytest.approx(first["auroc_a"] - first["auroc_b"])


def test_scores_read_with_the_recorded_key(tmp_path):
    """A scores file holding an older key's records: the report reads the key the manifest recorded."""
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir)
    run = load_run(run_dir)
    row = next(r for r in run.rows if r["metric"] == "auroc" and r["value"] is not None)
    path = RunStore(run_dir).cell(row["dataset"], row["model"]).root / "scores" / f"{row['detector']}.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    stale = [{**rec, "key": "stale", "value": 0.0} for rec in lines]
    path.write_text("".join(json.dumps(r) + "\n" for r in stale + lines + stale))
    cell = load_run(run_dir).cell_scores(row["dataset"], row["model"], [row["detector"]])
    s = cell.scores[row["detector"]]
    ok = np.isfinite(s)
    assert auroc(cell.labels[ok], s[ok]) == pytest.approx(row["value"], abs=1e-12)


def test_score_logs_are_read_whole_and_a_corrupt_line_is_named(tmp_path: Path) -> None:
    """The one-call parse of a log keeps every complete record and drops a cut last line; a corrupt line in the
    middle still gives the error naming its line number."""
    from haldet.errors import HaldetError
    from haldet.store.records import read_records

    log = tmp_path / "det.jsonl"
    log.write_bytes(b'{"id": "a", "value": 1.5}\n\n{"id": "b", "value": null}\n{"id": "c", "val')
    assert read_records(log) == [{"id": "a", "value": 1.5}, {"id": "b", "value": None}]
    log.write_bytes(b'{"id": "a", "value": 1.5}\n{"id": "b", "value": nul}\n{"id": "c", "value": 2}\n')
    with pytest.raises(HaldetError, match="corrupt record at line 2"):
        read_records(log)
    # two values on one line parse as valid JSON inside the joined array: still that line's error, not 3 records
    log.write_bytes(b'{"id": "a", "value": 1.5}\n{"id": "b", "value": 2}, {"id": "c", "value": 3}\n')
    with pytest.raises(HaldetError, match="corrupt record at line 2"):
        read_records(log)
