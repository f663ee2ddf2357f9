"""The report's figures as files a paper can use: every plot of report.html also as PDF and PNG under figures/,
listed in a run's manifest (a `--out` folder has no manifest: the listing `write_reports` returns names them),
the same figures embedded in the page, identical bytes when the report is written again, no stale files."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

from PIL import Image

from haldet.figures.render import PNG_DPI
from haldet.report.build import listing, write_reports
from haldet.report.rundata import load_run
from repo_paths import FIXTURES

FIXTURE = FIXTURES / "run_fixture"
FIGURES = ["heatmap-smollm2-135m", "cost-smollm2-135m", "roc-halueval_qa-smollm2-135m", "pr-halueval_qa-smollm2-135m"]


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_runs_figures_are_files_listed_in_its_manifest_and_embedded(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    (run / "figures").mkdir()
    (run / "figures" / "gone-old-figure.pdf").write_bytes(b"%PDF-old")      # drawn by an earlier report
    written = write_reports(run, [load_run(run)], write_results=False, n_boot=20)
    manifest = json.loads((run / "manifest.json").read_text())
    assert [f["name"] for f in manifest["figures"]] == FIGURES
    assert manifest["figures"][2]["title"].startswith("ROC: halueval_qa | smollm2-135m (N=")
    listed = [name for f in manifest["figures"] for name in f["files"]]
    assert listed == [f"figures/{n}.{fmt}" for n in FIGURES for fmt in ("pdf", "png")]
    assert sorted(listed) == sorted(n for n in written if n.startswith("figures/"))
    assert sorted(p.name for p in (run / "figures").iterdir()) == sorted(Path(n).name for n in listed)  # old: gone
    for name in listed:
        data = (run / name).read_bytes()
        if name.endswith(".png"):
            img = Image.open(io.BytesIO(data))
            assert img.format == "PNG" and img.size[0] >= 3 * PNG_DPI and round(img.info["dpi"][0]) == PNG_DPI
        else:
            assert data.startswith(b"%PDF-") and b"/CreationDate" not in data
    html = (run / "report.html").read_text()
    assert all(f'<figure id="fig-{n}"><svg ' in html for n in FIGURES)               # the page shows the same set
    assert listing(written)[-1] == f"{run / 'figures'}/ (4 PDF, 4 PNG)"
    first = digest(run / "figures")
    write_reports(run, [load_run(run)], write_results=False, n_boot=20)
    assert digest(run / "figures") == first                                        # byte-identical rerun
    assert json.loads((run / "manifest.json").read_text())["figures"] == manifest["figures"]


def test_a_report_folder_lists_its_figures_without_a_manifest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    written = write_reports(out, [load_run(FIXTURE)], n_boot=20)
    assert not (out / "manifest.json").exists()
    assert sorted(n for n in written if n.startswith("figures/")) == sorted(
        f"figures/{n}.{fmt}" for n in FIGURES for fmt in ("pdf", "png"))
    assert all(p.is_file() for p in written.values())
