"""Plugins register through entry points: the example package under examples/ is installed into a temporary
directory (never into the shared environment) and its detector, dataset and judge are found and run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

CHECK = """
import json
from haldet.testing.conformance import check_detector
from haldet.datasets.base import DATASETS, get_adapter
from haldet.detectors.base import DETECTORS
from haldet.judges.base import JUDGES
from haldet.schema import Generation

items, _ = get_adapter("example_capitals", None, None).load(limit=None, seed=42, on_bad_row="fail")
judge = JUDGES.get("rule:example_exact")()
gen = lambda i, text: Generation(id=i.id, prompt="p", response=text, token_ids=[], token_logprobs=[],
                                 finish_reason="stop", n_tokens=0, model="m")
paris = next(i for i in items if i.references == ["Paris"])
print(json.dumps({
    "problems": check_detector(DETECTORS.get("min_token_prob")),
    "origins": [DETECTORS.origin("min_token_prob"), DATASETS.origin("example_capitals"),
                JUDGES.origin("rule:example_exact"), DETECTORS.origin("perplexity")],
    "n_items": len(items),
    "verdicts": [judge.judge(paris, gen(paris, t)).category for t in ("Paris.", "Lyon")],
}))
"""


def _env(*paths: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(ROOT / "src")]),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"}


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    """The example package installed with pip into its own target directory (a copy is built: setuptools writes
    build files next to the sources)."""
    tmp = tmp_path_factory.mktemp("plugin")
    src = shutil.copytree(ROOT / "examples" / "haldet-plugin-example", tmp / "src")
    target = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(src)], check=True, capture_output=True, timeout=300)
    return target


def test_example_plugin_registers_and_runs(plugin_dir: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=_env(plugin_dir),
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["problems"] == []                                  # the plugin detector passes the suite
    assert found["origins"] == ["plugin haldet-plugin-example"] * 3 + ["built-in"]
    assert found["n_items"] == 8 and found["verdicts"] == ["correct", "hallucination"]
    listed = subprocess.run([sys.executable, "-m", "haldet", "detectors", "list", "--json"], capture_output=True,
                            text=True, env=_env(plugin_dir), timeout=300)
    rows = {d["name"]: d for d in json.loads(listed.stdout)}
    assert rows["min_token_prob"]["origin"] == "plugin haldet-plugin-example" and rows["min_token_prob"]["family"]


def test_broken_plugin_is_one_clear_error(tmp_path: Path) -> None:
    """An entry point that does not import names the plugin and what to do; no traceback."""
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[haldet.detectors]\nghost = no_such_module_here:Ghost\n")
    out = subprocess.run([sys.executable, "-m", "haldet", "detectors", "list"], capture_output=True, text=True,
                         env=_env(tmp_path), timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "ghost" in text and "failed to load" in text and "uninstall" in text
    assert "Traceback" not in text
