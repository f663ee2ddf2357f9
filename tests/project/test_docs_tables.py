"""The measured tables of docs/speed.md and docs/scale.md are what benchmarks/results/*.json render to
(benchmarks/render_docs.py): a number typed into a table by hand, or a stored figure changed without rendering,
fails here."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from repo_paths import REPO

ROOT = REPO


def load_renderer():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "benchmarks" / "render_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_table_matches_its_stored_figures() -> None:
    render = load_renderer()
    pages = render.PAGES
    tables = [m.group("name") for p in pages for m in render.MARK.finditer(p.read_text())]
    assert {"scale-report", "scale-flow", "scale-model", "speed-generation", "speed-protocol"} <= set(tables)
    assert render.differing() == []


def test_a_number_edited_by_hand_is_caught(tmp_path: Path) -> None:
    """Negative control: one digit of a table changed in a copy of the page is reported."""
    render = load_renderer()
    page = tmp_path / "scale.md"
    text = (ROOT / "docs" / "scale.md").read_text()
    m = next(m for m in render.MARK.finditer(text) if m.group("name") == "scale-report")
    body = m.group("body")
    row = body.splitlines()[2]  # first data row
    edited = row.replace("|", "| 9", 2).replace("| 9", "|", 1)  # a 9 put in front of the second cell
    assert edited != row
    page.write_text(text.replace(row, edited))
    render.ROOT = tmp_path
    assert render.differing((page,)) == ["scale.md: table scale-report"]


def test_a_stored_figure_changed_without_rendering_is_caught(tmp_path: Path) -> None:
    render = load_renderer()
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    stored = json.loads((results / "scale-report.json").read_text())
    stored["data"]["report"]["runs"][-1]["haldet_report"]["peak_rss_mb"] += 100
    (results / "scale-report.json").write_text(json.dumps(stored))
    render.RESULTS = results
    assert any("scale-report" in d for d in render.differing())


def test_a_protocol_report_renders_its_tables() -> None:
    """benchmarks/protocol.py's JSON (as `--store` writes it) renders the protocol and per-detector tables."""
    render = load_renderer()
    stages = {"load_data": 0.5, "generate": 20.0, "annotate": 1.0, "sample": 50.0, "auxiliary": 0.0,
              "features": 0.0}
    mode = {"wall_s": 80.0, "cpu_s": 150.0, "stage_wall_s": stages, "detectors_fit_score_s": 3.0,
            "per_detector_s": {"haloscope": 2.0, "msp": 0.001, "saplma": 1.0},
            "ratio_all_over_generate_plus_sample": 1.143, "runs_wall_s": [80.0, 83.5]}
    stored = {"data": {"modes": {"haldet-separate": {**mode, "wall_s": 110.0}, "haldet": mode},
                       "ratio_over_decoding_alone": 1.149, "loadavg_before": [0.4], "loadavg_after": [0.9]}}
    table = render.speed_protocol(stored)
    assert table[2].startswith("| `haldet-separate`") and "| 110.0 s |" in table[2]
    assert "| 20.0 (with the evidence) |" in table[3] and "80.0 / 83.5" in table[3]
    assert "**1.149**" in table[-1]
    per = render.speed_protocol_detectors(stored)
    assert per[2] == "| `haloscope` | 2.000 | 67% |" and per[-1] == "All 3: 3.00 s."


def test_forward_costs_render_each_call_and_the_cost_of_a_decoded_token() -> None:
    """benchmarks/forward_costs.py's JSON renders a row per call shape, milliseconds per call and per token position,
    and what a decoded token costs over one read in a prompt pass (0.2 / 0.8 = 0.25; 9.0 / 0.8 = 11.25)."""
    render = load_renderer()
    data = {"model": "m", "dtype": "float32", "threads": 2, "context": 200, "step_over_prompt_position": 2.5,
            "steps": [{"rows": 8, "wall_s": 0.072, "ms_per_position": 9.0},
                      {"rows": 96, "wall_s": 0.192, "ms_per_position": 2.0}],
            "passes": [{"kind": "prompt", "rows": 8, "width": 160, "cached": 0, "wall_s": 1.024,
                        "ms_per_position": 0.8},
                       {"kind": "after_cache", "rows": 16, "width": 77, "cached": 200, "wall_s": 1.1,
                        "ms_per_position": 0.893}]}
    table = render.speed_forward_costs({"data": data})
    assert table[2] == "| decoding step | 8 | 1 | 200 | 72.0 | 9.00 |"
    assert table[4] == "| pass: prompts read | 8 | 160 | 0 | 1,024.0 | 0.80 |"
    assert table[5].startswith("| pass: tokens read after a cache")
    assert table[-1].endswith("costs **2.5x** one read in a prompt pass; in a step of 8 rows, 11.2x.")
