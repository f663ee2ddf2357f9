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


def load_benchmark(name: str):  # type: ignore[no-untyped-def]
    """A fresh copy of benchmarks/NAME.py (its module-level paths can be pointed elsewhere without leaking)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_renderer():  # type: ignore[no-untyped-def]
    return load_benchmark("render_docs")


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


def test_a_decoding_step_is_priced_between_and_beyond_the_measured_row_counts() -> None:
    """Linear between measured row counts (8: 70 ms, 32: 100 ms, 96: 180 ms), the nearest segment's line beyond."""
    render = load_renderer()
    steps = [{"rows": 8, "wall_s": 0.07}, {"rows": 96, "wall_s": 0.18}, {"rows": 32, "wall_s": 0.10}]
    assert abs(render.step_seconds(steps, 20) - 0.085) < 1e-12
    assert abs(render.step_seconds(steps, 64) - 0.14) < 1e-12
    assert abs(render.step_seconds(steps, 112) - 0.20) < 1e-12
    assert abs(render.step_seconds(steps, 4) - 0.065) < 1e-12


def test_the_protocol_priced_by_forward_costs_splits_model_calls_from_the_loops_own_work(tmp_path: Path) -> None:
    """Hand-computed: steps of 8 rows cost 70 ms, of 96 rows 190 ms; a pass position 0.8 ms (the cheaper pass).
    Decoding alone: 10 steps x 8 rows (0.7 s) + 20 x 96 (3.8 s) + 1,000 positions (0.8 s) = 5.3 s of 8.0 s measured.
    Default: 18 x 8 (1.26 s) + 20 x 96 + 2,000 positions (1.6 s) = 6.66 s of 10.0 s. With 1.0 s of detectors and
    1.0 s of the rest of a 12.0 s run: (8 + 0.56 + 0.8 + 2) / 8 = 1.420 as called; (8 + 0.8 + 2) / 8 = 1.350."""
    render = load_renderer()
    machine = {"cpu": "cpu A", "cores": 2}
    costs = {"date": "d", "commit": "c", "machine": machine,
             "data": {"threads": 2, "steps": [{"rows": 8, "wall_s": 0.07}, {"rows": 96, "wall_s": 0.19}],
                      "passes": [{"ms_per_position": 0.8}, {"ms_per_position": 1.0}]}}
    (tmp_path / "forward_costs.json").write_text(json.dumps(costs))
    render.RESULTS = tmp_path

    def kinds(steps: int, rows: int, positions: int) -> dict[str, int]:
        return {"steps": steps, "step_rows": steps * rows, "passes": 3 if positions else 0,
                "pass_positions": positions}

    separate = {"model_call_kinds": {"generate": kinds(10, 8, 1000), "sample": kinds(20, 96, 0),
                                     "token_pass": kinds(0, 0, 900)}}
    default = {"model_call_kinds": {"generate": kinds(18, 8, 1500), "sample": kinds(20, 96, 0),
                                    "unconditional": kinds(0, 0, 500)},
               "stage_wall_s": {"generate": 5.0, "sample": 4.5, "unconditional": 0.5, "annotate": 0.2},
               "detectors_fit_score_s": 1.0, "wall_s": 12.0}
    stored = {"machine": machine, "data": {"threads": 2, "decoding_alone_s": 8.0, "ratio_over_decoding_alone": 1.5,
                                           "modes": {"haldet-separate": separate, "haldet": default}}}
    lines = render.speed_protocol_priced(stored)
    assert lines[2].endswith("| 30 | 4.5 | 1,000 | 0.8 | 5.3 | 8.0 | 2.7 |")
    assert lines[3].endswith("| 38 | 5.1 | 2,000 | 1.6 | 6.7 | 10.0 | 3.3 |")
    assert lines[4] == "| the default's more |  | 0.6 |  | 0.8 | 1.4 | 2.0 | 0.6 |"
    assert "**1.420** of the decoding alone" in lines[6] and "**1.350** (measured: 1.500)" in lines[6]
    # negative control: forward costs from another machine are not used to price this run
    (tmp_path / "forward_costs.json").write_text(json.dumps({**costs, "machine": {"cpu": "cpu B", "cores": 2}}))
    assert render.speed_protocol_priced(stored)[0].startswith("Not priced: the forward costs (cpu B")


def test_the_readme_quotes_every_stored_speed_figure_as_stored() -> None:
    figures = load_benchmark("readme_figures")
    assert len(figures.quoted()) >= 8 and figures.missing() == []


def test_a_stored_figure_the_readme_quotes_changed_alone_is_caught(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Negative control: the protocol re-stored with another ratio (the README not following) is reported, and so
    is a README whose quoted figure was edited by hand."""
    figures = load_benchmark("readme_figures")
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    stored = json.loads((results / "protocol.json").read_text())
    stored["data"]["ratio_over_decoding_alone"] += 0.1
    (results / "protocol.json").write_text(json.dumps(stored))
    with monkeypatch.context() as patch:  # readme_figures reads through the shared render_docs module
        patch.setattr(figures.render_docs, "RESULTS", results)
        assert [f for f in figures.missing() if "the decoding alone in wall time" in f] != []
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    quoted = figures.quoted()[-1]  # the priced ratio
    number = quoted.split()[-2]
    assert number in text
    readme.write_text(text.replace(f"\n{number} it", f"\n{number}9 it").replace(f" {number} it", f" {number}9 it"))
    assert figures.missing(readme) == [quoted]
