"""`haldet report` reads what it shows from the run directory alone: it never asks the detector registry (which
imports every detector module, and torch with them) how a detector behaves, since the run recorded it in its
manifest (`trains`, run_format 3). A manifest without it (older runs) is read through the registry."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from haldet.report import html as html_module
from haldet.report.rundata import load_run
from haldet.store import RunStore
from haldet.testing.synthetic_run import write_synthetic_run
from repo_paths import REPO

HEAVY = ("torch", "transformers", "spacy")
REPORT = """
import json, sys
from haldet.cli import entry
sys.argv = ["haldet", "report", sys.argv[1], "--out", sys.argv[2], "--n-boot", "20"]
try:
    entry()
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps([m for m in {heavy} if m in sys.modules]))
"""


def heavy_imported_by_report(run: Path, out: Path) -> list[str]:
    """The heavy libraries loaded in a fresh process that runs `haldet report RUN --out OUT`."""
    src = REPO / "src"
    proc = subprocess.run([sys.executable, "-c", REPORT.format(heavy=HEAVY), str(run), str(out)],
                          capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "report.html").exists()
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_haldet_report_does_not_import_torch(tmp_path: Path) -> None:
    root = tmp_path / "run"
    write_synthetic_run(root, n_items=40, names=["perplexity", "saplma"])
    assert heavy_imported_by_report(root, tmp_path / "report") == []


def fit_cells(html: str) -> dict[str, str]:
    """Detector -> its "fit (s)" cell in the cost table."""
    header = re.search(r"<thead>(.*?)</thead>", html).group(1)
    fit = re.findall(r"<th[^>]*>(.*?)</th>", header).index("fit (s)")
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", html)]
    return {re.sub("<.*?>", "", tds[1]): tds[fit] for tds in rows if tds}


def test_the_fit_column_reads_trains_from_the_manifest_and_old_manifests_from_the_registry(tmp_path: Path) -> None:
    root = tmp_path / "run"
    write_synthetic_run(root, n_items=40, names=["perplexity", "saplma"])
    store = RunStore(root)
    manifest = store.read_manifest()
    for det in manifest["cells"][0]["detectors"]:
        det["trains"] = det["name"] == "saplma"  # as a run records them
    store.write_manifest(manifest)
    run = load_run(root)
    recorded = html_module.recorded_trains([run])
    assert recorded == {"perplexity": False, "saplma": True}
    shown = fit_cells(html_module.cost_section(run.rows, trains=recorded))
    assert shown == {"perplexity": "-", "saplma": "—"}  # "-": does not train; "—": trains, no seconds recorded
    for det in manifest["cells"][0]["detectors"]:  # a manifest of run_format 2: the registry answers
        del det["trains"]
    store.write_manifest({**manifest, "run_format": 2})
    old = load_run(root)
    assert html_module.recorded_trains([old]) == {}
    assert fit_cells(html_module.cost_section(old.rows, trains=html_module.recorded_trains([old]))) == shown
