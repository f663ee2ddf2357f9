"""The benchmarks' own measuring: benchmarks/scale.py gives each child's own peak memory (not the largest child's so
far), and benchmarks/results.py's --check fails loudly when a figure drifts past its noise."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from repo_paths import REPO

BENCH = REPO / "benchmarks"


@functools.cache  # each benchmark module once (results times its reference workload when it is loaded)
def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def allocating(mb: int) -> list[str]:
    return [sys.executable, "-c", f"x = b'\\x01' * ({mb} << 20); print(len(x))"]


def test_each_child_reports_its_own_peak() -> None:
    """A 200 MB child, then a 20 MB one: each reads its own peak (the former RUSAGE_CHILDREN reading gave the
    second 208 MB too), however large the process measuring them (ballast here)."""
    scale = load("scale")
    ballast = b"\x02" * (150 << 20)  # a child forked from this process directly would count this until its exec
    big = scale.timed_child(allocating(200))
    small = scale.timed_child(allocating(20))  # after the big one: the largest child so far would say >= 200 MB
    assert big["peak_rss_mb"] >= 200
    assert 20 <= small["peak_rss_mb"] < 120, small
    assert big["peak_rss_mb"] - small["peak_rss_mb"] > 150
    assert len(ballast) == 150 << 20


def test_check_fails_on_drift_and_passes_within_noise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    results = load("results")
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    figures = {"runs": [{"items": 100, "haldet_report": {"wall_s": 10.0, "peak_rss_mb": 500.0}}]}
    results.finish("demo", figures, "demo", None)
    results.finish("demo", {"runs": [{"items": 100, "haldet_report": {"wall_s": 11.0, "peak_rss_mb": 520.0}}]},
                   None, "demo")  # within noise: returns
    with pytest.raises(SystemExit) as stop:
        results.finish("demo", {"runs": [{"items": 100, "haldet_report": {"wall_s": 10.0, "peak_rss_mb": 900.0}}]},
                       None, "demo")
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "FIGURES DRIFTED" in err and "runs[items=100].haldet_report.peak_rss_mb: stored 500.0, now 900.0" in err
    with pytest.raises(SystemExit):  # other sizes only: nothing compared is a failure too, not a pass
        results.finish("demo", {"runs": [{"items": 7, "haldet_report": {"wall_s": 1.0}}]}, None, "demo")
    assert "NOTHING TO CHECK" in capsys.readouterr().err


def test_check_compares_seconds_at_the_stored_machine_speed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Figures stored while the reference workload took 0.1 s, checked while it takes 0.2 s in wall time (the
    cores shared) but as long in CPU time: wall seconds twice as long are within noise, CPU seconds twice as long
    are not, memory is never scaled; without the scaling the wall seconds drift."""
    results = load("results")
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    speed = {"wall_s": 0.1, "cpu_s": 0.1}
    monkeypatch.setattr(results, "_REFERENCE_AT_START", speed)
    monkeypatch.setattr(results, "reference_seconds", lambda: speed)
    results.finish("demo", {"run": {"wall_s": 10.0, "cpu_s": 10.0, "peak_rss_mb": 500.0}}, "demo", None)
    assert results.load("demo")["reference_s"] == [speed, speed]
    shared = {"wall_s": 0.2, "cpu_s": 0.1}
    monkeypatch.setattr(results, "_REFERENCE_AT_START", shared)
    monkeypatch.setattr(results, "reference_seconds", lambda: shared)
    results.finish("demo", {"run": {"wall_s": 20.0, "cpu_s": 10.0, "peak_rss_mb": 500.0}}, None, "demo")
    assert "2.00x as slow in wall time and 1.00x in CPU time" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        results.finish("demo", {"run": {"wall_s": 20.0, "cpu_s": 20.0, "peak_rss_mb": 1000.0}}, None, "demo")
    err = capsys.readouterr().err
    assert "run.cpu_s: stored 10.0, now 20.0 (+100%" in err and "run.peak_rss_mb: stored 500.0, now 1000.0" in err
    assert "run.wall_s" not in err
    # the negative control: the same wall seconds, the machine as fast as when stored, drift
    monkeypatch.setattr(results, "_REFERENCE_AT_START", speed)
    monkeypatch.setattr(results, "reference_seconds", lambda: speed)
    with pytest.raises(SystemExit):
        results.finish("demo", {"run": {"wall_s": 20.0, "cpu_s": 10.0, "peak_rss_mb": 500.0}}, None, "demo")
    assert "run.wall_s: stored 10.0, now 20.0 (+100%" in capsys.readouterr().err
    # figures stored before the reference existed: compared as measured, and said so
    stored = results.load("demo")
    del stored["reference_s"]
    (tmp_path / "demo.json").write_text(json.dumps(stored))
    monkeypatch.setattr(results, "_REFERENCE_AT_START", shared)
    monkeypatch.setattr(results, "reference_seconds", lambda: shared)
    with pytest.raises(SystemExit):
        results.finish("demo", {"run": {"wall_s": 20.0, "cpu_s": 10.0, "peak_rss_mb": 500.0}}, None, "demo")
    err = capsys.readouterr().err
    assert "stored without the reference workload" in err and "run.wall_s: stored 10.0, now 20.0" in err


def test_the_reference_workload_times_both_clocks() -> None:
    """Two clocks, each a positive time of the order of the ~70 ms workload (not a constant, not zero)."""
    first = load("results").reference_seconds(rounds=3)
    assert set(first) == {"wall_s", "cpu_s"} and all(0.001 < v < 5 for v in first.values())
    assert first["cpu_s"] <= first["wall_s"] * 1.2  # one thread: no more CPU than wall time, within clock noise


def test_check_names_another_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Figures stored on one CPU and checked on another: the check says so before any drift it reports."""
    results = load("results")
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    figures = {"generate": {"wall_s": 10.0}}
    results.finish("demo", figures, "demo", None)
    results.finish("demo", figures, None, "demo")
    assert "ANOTHER MACHINE" not in capsys.readouterr().err  # the same machine: nothing said
    stored = results.load("demo")
    stored["machine"]["cpu"] = "Some Other CPU"
    (tmp_path / "demo.json").write_text(json.dumps(stored))
    with pytest.raises(SystemExit):
        results.finish("demo", {"generate": {"wall_s": 20.0}}, None, "demo")
    err = capsys.readouterr().err
    assert "ANOTHER MACHINE" in err and "'Some Other CPU' then" in err
    assert err.index("ANOTHER MACHINE") < err.index("FIGURES DRIFTED")


def test_the_stored_command_runs_again_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty argument (`--batch-sizes ""`) was stored as nothing, so the command could not be run again."""
    results = load("results")
    monkeypatch.setattr(sys, "argv", ["/x/benchmarks/peers_lmpolygraph.py", "--batch-sizes", "", "--n", "50"])
    assert results.command_line() == "python benchmarks/peers_lmpolygraph.py --batch-sizes '' --n 50"


def test_runs_named_by_mode_and_length_are_compared_with_their_own_stored_run() -> None:
    """long_inputs.py lists runs of two modes at several lengths, each with the same `items`: a rerun of one
    (mode, length) is compared with that run only (matched by `items`, the 8K run's figures were compared with a
    1K run's and every figure "drifted")."""
    results = load("results")
    stored = {"results": [{"mode": m, "length": n, "items": 2, "cpu_s": c} for m, n, c in
                          (("before", 1024, 24.0), ("after", 1024, 15.0), ("after", 8192, 190.0))]}
    assert results.drift(stored, {"results": [{"mode": "after", "length": 1024, "items": 2, "cpu_s": 16.0}]}) == []
    moved = results.drift(stored, {"results": [{"mode": "after", "length": 8192, "items": 2, "cpu_s": 400.0}]})
    assert moved == ["results[mode=after,length=8192].cpu_s: stored 190.0, now 400.0 (+111%; noise ±30%)"]


def test_protocol_groups_cost_the_default_less_the_mode_without_them() -> None:
    """benchmarks/protocol.py's `haldet-without-GROUP` modes: the detectors they leave out are the group's (all of
    them for `all`, an unknown group is refused), and a group's cost is the default's run less the mode's, in
    seconds (the sample stage, the same work in both, left out), positions and calls, with the mode's ratios over
    the decoding alone."""
    protocol = load("protocol")
    assert protocol.left_out("haldet") == () and protocol.left_out("haldet-without-prompt_free") == ("pmi", "cpmi")
    everything = protocol.left_out("haldet-without-all")
    assert set(everything) == {name for names, _ in protocol.GROUPS.values() for name in names}
    assert "icr_probe" in everything and "perplexity" not in everything
    with pytest.raises(SystemExit, match="unknown mode"):
        protocol.left_out("haldet-without-nothing")
    modes = {"haldet": {"wall_s": 100.0, "stage_wall_s": {"sample": 50.0},
                        "model_positions": {"generate": 120, "sample": 80},
                        "model_calls": {"generate": 30, "sample": 20}},
             "haldet-without-icr": {"wall_s": 92.5, "stage_wall_s": {"sample": 48.0},  # samples 2 s faster
                                    "model_positions": {"generate": 110, "sample": 80},
                                    "model_calls": {"generate": 24, "sample": 20}}}
    groups = protocol.group_costs(modes, decoding_alone=80.0, floor=160)
    assert list(groups) == ["icr"]
    assert groups["icr"] == {"detectors": ["icr_probe"], "wall_s": 92.5, "needs": protocol.GROUPS["icr"][1],
                             "default_spends_s": 5.5,  # (100 - 50) - (92.5 - 48), not 7.5
                             "default_spends_positions": 10, "default_spends_calls": 6,
                             "ratio_positions_over_decoding_alone": 1.188,  # 190 / 160
                             "ratio_over_decoding_alone": 1.156}  # 92.5 / 80


def test_protocol_reread_costs_the_reread_run_less_the_default() -> None:
    """benchmarks/protocol.py's `haldet-reread` mode (the samples read their prompts again) beside `haldet`: what
    starting the samples from the greedy answers' read prompts saves, and the rendered sentence says it."""
    protocol, render = load("protocol"), load("render_docs")
    default = {"wall_s": 80.0, "stage_wall_s": {"sample": 36.5}, "model_positions": {"generate": 120, "sample": 90},
               "model_calls": {"generate": 30, "sample": 150}}
    reread = {"wall_s": 86.25, "stage_wall_s": {"sample": 42.0}, "model_positions": {"generate": 120, "sample": 160},
              "model_calls": {"generate": 30, "sample": 170}}
    costs = protocol.reread_costs(default, reread)
    assert costs == {"sample_s": 5.5, "sample_positions": 70, "sample_calls": 20, "wall_s": 6.25}
    assert protocol.REREAD in protocol.MODES
    rendered = "\n".join(render.speed_protocol({"data": {"modes": {}, "reread": costs}}))
    assert "5.5 s, 70 token positions and 20 forward calls more, and the whole run 6.2" in rendered


def test_protocol_counts_decoding_steps_apart_from_passes() -> None:
    """benchmarks/protocol.py's `Positions` hook: a call feeding one token a row is a decoding step (its rows
    counted), a wider one a pass (its positions counted), per stage; the rendered sentence says both."""
    import torch

    protocol, render = load("protocol"), load("render_docs")
    positions = protocol.Positions()
    calls = {"generate": [(8, 160), (8, 1), (5, 1), (16, 77)], "sample": [(96, 1), (96, 1), (40, 1)]}
    for stage, shapes in calls.items():
        with positions.during(stage):
            for rows, width in shapes:
                positions._count(None, (), {"input_ids": torch.zeros((rows, width), dtype=torch.long)})
    kinds = positions.kinds()
    assert kinds == {"generate": {"steps": 2, "step_rows": 13, "passes": 2, "pass_positions": 8 * 160 + 16 * 77},
                     "sample": {"steps": 3, "step_rows": 232, "passes": 0, "pass_positions": 0}}
    assert positions.counted["generate"] == 13 + 8 * 160 + 16 * 77  # every position counted once, either kind
    stages = {"generate": 20.0, "sample": 50.0, "auxiliary": 0.0, "features": 0.0}
    mode = {"wall_s": 80.0, "cpu_s": 150.0, "stage_wall_s": stages, "detectors_fit_score_s": 3.0,
            "ratio_all_over_generate_plus_sample": 1.143, "runs_wall_s": [80.0], "model_call_kinds": kinds}
    rendered = "\n".join(render.speed_protocol({"data": {"modes": {"haldet": mode}}}))
    assert ("haldet: generate 2 steps of 6.5 rows on average and 2 passes over 2,512 positions, sample 3 steps of "
            "77.3 rows on average." in rendered)
