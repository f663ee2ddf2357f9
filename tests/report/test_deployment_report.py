"""Beyond-AUROC reporting: best single vs best ensemble (known answers against the paired bootstrap), the
`--metrics` columns and tables, and the HTML section built from stored curves."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from haldet.evaluation.compare import best_single_vs_ensemble, paired_bootstrap
from haldet.evaluation.rejection import risk_coverage
from haldet.report.deployment import deployment_section
from haldet.report.rundata import RunData
from haldet.report.tables import all_markdown
from terminal_table import results_table


@dataclass
class _Cell:
    labels: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)


def _rows(dataset, scenario, values):
    return [{"dataset": dataset, "scenario": scenario, "model": "m", "detector": d, "family": "gray",
             "metric": "auroc", "value": v, "cost_at_n": c} for d, (v, c) in values.items()]


def _cell(seed, n=80):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(int)
    return _Cell(y, {"a": y + rng.normal(size=n), "b": y * 0.2 + rng.normal(size=n),
                     "ens": y * 1.5 + rng.normal(size=n)})


def test_best_single_vs_ensemble_equals_the_paired_bootstrap_on_one_dataset():
    cell = _cell(0)
    from sklearn.metrics import roc_auc_score
    au = {d: roc_auc_score(cell.labels, s) for d, s in cell.scores.items()}
    rows = _rows("d1", "qa_open", {"a": (au["a"], 1.0), "b": (au["b"], 2.0), "ens": (au["ens"], 3.0)})
    [pair] = best_single_vs_ensemble(rows, {"ens"}, {("d1", "m"): cell}, n_boot=300, seed=7)
    ref = paired_bootstrap(cell.labels, cell.scores["ens"], cell.scores["a"], n_boot=300, seed=7)
    assert (pair.single, pair.ensemble) == ("a", "ens")  # the better single detector is chosen
    assert pair.diff == pytest.approx(ref.diff)
    assert (pair.ci_low, pair.ci_high, pair.p_value) == pytest.approx((ref.ci_low, ref.ci_high, ref.p_value))
    assert (pair.cost_single, pair.cost_ensemble) == (1.0, 3.0)


def test_scenario_difference_is_the_mean_over_its_datasets():
    cells = {("d1", "m"): _cell(1), ("d2", "m"): _cell(2)}
    rows = []
    for (ds, _), cell in cells.items():
        from sklearn.metrics import roc_auc_score
        rows += _rows(ds, "qa_open", {d: (roc_auc_score(cell.labels, s), None) for d, s in cell.scores.items()})
    [pair] = best_single_vs_ensemble(rows, {"ens"}, cells, n_boot=200)
    diffs = [paired_bootstrap(c.labels, c.scores["ens"], c.scores[pair.single], n_boot=0).diff for c in cells.values()]
    assert pair.datasets == ["d1", "d2"] and pair.diff == pytest.approx(np.mean(diffs))
    assert pair.ci_low < pair.diff < pair.ci_high and pair.cost_single is None


def _metric_rows():
    rows = []
    for det, (au, prr) in {"perplexity": (0.71, 0.35), "token_sar": (0.64, 0.2)}.items():
        for metric, v in (("auroc", au), ("aupr", 0.5), ("fpr95", 0.8), ("prr", prr), ("ece", 0.1)):
            rows.append({"dataset": "halueval_qa", "scenario": "qa_open", "model": "smollm2-135m", "detector": det,
                         "family": "gray", "metric": metric, "value": v, "ci_low": v - 0.1, "ci_high": v + 0.1,
                         "n": 40, "n_pos": 20, "coverage": 1.0})
    return rows


def _render(group, width=80):
    console = Console(width=width, record=True)
    console.print(group)
    return console.export_text()


def test_metrics_option_adds_columns_and_tables_the_default_stays_as_it_was():
    rows = _metric_rows()
    default = _render(results_table(rows, width=80))
    assert "PRR" not in default and "ECE" not in default
    picked = _render(results_table(rows, width=80, metrics=["prr", "ece"]))
    assert "PRR" in picked and "0.350" in picked and "ECE" in picked
    assert max(len(line) for line in picked.splitlines()) <= 80
    md = all_markdown(rows, metrics=["prr"])
    assert "PRR by scenario" in md and "35.00" in md
    assert "PRR by scenario" not in all_markdown(rows)


def test_html_section_shows_metrics_risk_coverage_and_reliability():
    rows = _metric_rows()
    y = np.array([0, 0, 1, 1, 0, 1])
    curve = risk_coverage(y, np.array([0.1, 0.2, 0.9, 0.8, 0.3, 0.4])).sampled()
    rel = {"edges": [i / 10 for i in range(11)], "n": [1, 0, 0, 2, 0, 0, 0, 1, 0, 2],
           "confidence": [0.05, None, None, 0.33, None, None, None, 0.71, None, 0.95],
           "observed": [0.0, None, None, 0.5, None, None, None, 1.0, None, 1.0]}
    manifest = {"cells": [{"dataset": "halueval_qa", "model": "smollm2-135m", "detectors": [
        {"name": "perplexity", "identity": {}, "meta": {},
         "curves": {"risk_coverage": curve, "reliability": rel, "calibration": {"method": "platt"}}}]}]}
    html = deployment_section([RunData(Path("/nonexistent"), manifest, rows)], rows, n_boot=10)
    assert "Risk-coverage curves" in html and "Reliability diagrams" in html and html.count("<svg") == 2
    assert "0.350" in html and "ECE" in html and "perfectly calibrated" in html
    assert deployment_section([RunData(Path("/nonexistent"), {"cells": []}, [])], [], n_boot=10) == ""


def test_a_metric_no_row_holds_and_a_calibrated_suite_run_are_refused():
    from haldet.cli.options import check_metrics
    from haldet.config import RunConfig
    from haldet.errors import HaldetError
    from haldet.flow.run import validate_names

    rows = _metric_rows()
    assert check_metrics(["prr", "ece"], rows) == ["prr", "ece"]
    with pytest.raises(HaldetError) as err:
        check_metrics(["prr", "brierr"], rows)
    assert "brierr" in err.value.message and "auroc" in err.value.hint
    with pytest.raises(HaldetError, match="calibration"):
        validate_names(RunConfig(suite="verigray", evaluation={"calibration": "platt"}))
