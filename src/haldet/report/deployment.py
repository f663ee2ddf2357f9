"""What a user deciding whether to deploy a detector reads beyond AUROC: rejection metrics (PRR, AURC),
calibrated probabilities (ECE, Brier, reliability diagrams), risk-coverage curves, and ensembles (members, weights,
best single detector vs best ensemble per scenario with a paired bootstrap). Everything is read from the stored
run (result rows, manifest curves, cached test scores); nothing but the ensemble comparison's resamples is computed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from haldet.evaluation.aggregate import scenario_group
from haldet.evaluation.compare import ScenarioPair, best_single_vs_ensemble
from haldet.figures.charts import line_figure
from haldet.figures.data import Series
from haldet.figures.render import FigureSet
from haldet.report.rundata import RunData

# the new result rows, in the order the reports show them; lower is better for the last three
DEPLOY_METRICS = ("prr", "prr_50", "rej_auc", "aurc", "ece", "brier")
METRIC_TITLE = {"prr": "PRR", "prr_50": "PRR@50%", "rej_auc": "rejection AUC", "aurc": "AURC", "ece": "ECE",
                "brier": "Brier"}
MAX_FIGS = 24


def _e(text: Any) -> str:
    return escape(str(text), quote=True)


def _v(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{float(v):.{digits}f}"


def detector_entries(runs: Sequence[RunData]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(dataset, model, detector) -> its manifest entry (identity, meta, curves); a later run wins."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in runs:
        for cell in run.cells():
            for d in cell.get("detectors") or []:
                out[(str(cell.get("dataset")), str(cell.get("model")), str(d.get("name")))] = d
    return out


def ensemble_names(runs: Sequence[RunData]) -> set[str]:
    """Detectors whose identity lists members (the `ensemble` detector and any subclass)."""
    return {name for (_, _, name), d in detector_entries(runs).items() if (d.get("identity") or {}).get("members")}


def ensemble_pairs(runs: Sequence[RunData], rows: Sequence[Mapping[str, Any]], n_boot: int) -> list[ScenarioPair]:
    """Best single detector vs best ensemble per (model, Table 2 scenario column), from the cached test scores."""
    ensembles = ensemble_names(runs)
    if not ensembles:
        return []
    scores: dict[tuple[str, str], Any] = {}
    for run in runs:
        for cell in run.cells():
            key = (str(cell.get("dataset")), str(cell.get("model")))
            if cell.get("error"):
                continue
            names = [str(d.get("name")) for d in cell.get("detectors") or []]
            data = run.cell_scores(key[0], key[1], names)
            if data is not None:
                scores[key] = data
    return best_single_vs_ensemble(rows, ensembles, scores, group=scenario_group, n_boot=n_boot)


PAIR_HEADER = ("model", "scenario", "best single", "AUROC", "Cost@N (s)", "best ensemble", "AUROC", "Cost@N (s)",
               "Δ AUROC [95% CI]", "p", "N", "note")


def pair_cells(p: ScenarioPair) -> list[str]:
    ci = f" [{_v(p.ci_low)}, {_v(p.ci_high)}]" if p.ci_low is not None else ""
    return [p.model, p.scenario, p.single, _v(p.auroc_single), _v(p.cost_single, 2), p.ensemble,
            _v(p.auroc_ensemble), _v(p.cost_ensemble, 2), _v(p.diff) + ci, _v(p.p_value), str(p.n),
            "; ".join(p.notes)]


def pairs_markdown(pairs: Sequence[ScenarioPair], n_boot: int) -> str:
    if not pairs:
        return ""
    lines = ["**Best single detector vs best ensemble per scenario** (test AUROC, mean over the scenario's "
             f"datasets; Δ = ensemble - single with a paired stratified bootstrap, {n_boot} resamples per dataset, "
             "averaged resample by resample)", "", "| " + " | ".join(PAIR_HEADER) + " |",
             "|" + "|".join(["---"] * 3 + ["---:"] * 2 + ["---"] + ["---:"] * 5 + ["---"]) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in pair_cells(p)) + " |" for p in pairs]
    return "\n".join(lines) + "\n"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> str:
    head = "".join(f'<th class="l">{h}</th>' if i < left else f"<th>{h}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _with_ci(row: Mapping[str, Any] | None) -> str:
    if not row:
        return "—"
    ci = (f' <span class="muted">[{_v(row.get("ci_low"))}, {_v(row.get("ci_high"))}]</span>'
          if row.get("ci_low") is not None else "")
    return _v(row.get("value")) + ci


def deployment_section(runs: Sequence[RunData], rows: Sequence[Mapping[str, Any]], n_boot: int,
                       figures: FigureSet | None = None) -> str:
    """The HTML section: metric table, risk-coverage (rejection) curves, reliability diagrams, ensembles."""
    figures = figures if figures is not None else FigureSet(formats=())
    by_key: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("metric") in DEPLOY_METRICS:
            by_key.setdefault((str(r["model"]), str(r["dataset"]), str(r["detector"])), {})[str(r["metric"])] = r
    if not by_key:
        return ""
    shown = [m for m in DEPLOY_METRICS if any(m in v for v in by_key.values())]
    body = [[_e(k[0]), _e(k[1]), _e(k[2]), *(_with_ci(v.get(m)) for m in shown),
             _e("; ".join(sorted({str(x.get("note")) for x in v.values() if x.get("note")})))]
            for k, v in by_key.items()]
    out = ["<h2 id=deploy>Rejection, calibration and ensembles</h2>",
           "<p class=muted>PRR = (A - A_random) / (A_oracle - A_random), A = mean kept accuracy as the most "
           "suspicious answers are rejected (full range; PRR@50%: up to half rejected); AURC = area under the "
           "risk-coverage curve (lower is better); ECE (10 equal-width bins) and Brier of the probabilities a "
           "calibration fitted on validation gives (lower is better). 95% bootstrap CIs. See docs/reports.md.</p>",
           _table(["model", "dataset", "detector", *(METRIC_TITLE[m] for m in shown), "note"], body, left=3)]
    entries = detector_entries(runs)
    risk_figs, rel_figs = [], []
    cells = list(dict.fromkeys((ds, model) for ds, model, _ in entries))
    for ds, model in cells[:MAX_FIGS]:
        dets = [(name, e) for (d, m, name), e in entries.items() if (d, m) == (ds, model) and e.get("curves")]
        rc = [Series(name, [(x, y, "") for x, y in zip(e["curves"]["risk_coverage"]["coverage"],
                                                       e["curves"]["risk_coverage"]["risk"], strict=True)])
              for name, e in dets if (e["curves"].get("risk_coverage") or {}).get("coverage")]
        if rc:
            risk_figs.append(figures.add(f"risk-coverage-{ds}-{model}", line_figure(
                rc, title=f"{ds} | {model}", xlabel="coverage", ylabel="selective risk"),
                f"Risk-coverage: {ds} | {model}"))
        rel = [Series(f"{name} ({e['curves']['calibration']['method']})",
                      [(c, o, str(n)) for c, o, n in zip(e["curves"]["reliability"]["confidence"],
                                                         e["curves"]["reliability"]["observed"],
                                                         e["curves"]["reliability"]["n"], strict=True)
                       if c is not None and o is not None])
               for name, e in dets if e["curves"].get("reliability")]
        if rel:
            rel_figs.append(figures.add(f"reliability-{ds}-{model}", line_figure(
                rel, title=f"{ds} | {model}", xlabel="mean predicted P(hallucination)",
                ylabel="observed hallucination rate",
                reference=Series("perfectly calibrated", [(0.0, 0.0, ""), (1.0, 1.0, "")])),
                f"Reliability: {ds} | {model}"))
    if risk_figs:
        out += ["<h3>Risk-coverage curves</h3><p class=muted>Selective risk (share of hallucinated answers among "
                "those kept) when the least suspicious share of test answers is kept (ties in expectation).</p>",
                "<div class=figs>" + "".join(risk_figs) + "</div>"]
    if rel_figs:
        out += ["<h3>Reliability diagrams</h3><p class=muted>Test answers binned by calibrated probability "
                "(10 equal-width bins; the marker label is the bin's item count).</p>",
                "<div class=figs>" + "".join(rel_figs) + "</div>"]
    out.append(ensemble_html(runs, rows, n_boot))
    return "".join(out)


def ensemble_html(runs: Sequence[RunData], rows: Sequence[Mapping[str, Any]], n_boot: int) -> str:
    members = []
    for (ds, model, name), e in detector_entries(runs).items():
        fit = (e.get("meta") or {}).get("ensemble")
        if fit:
            weights = ", ".join(f"{m} {w:+.3f}" for m, w in fit["weights"].items())
            members.append([_e(model), _e(ds), _e(name), _e(fit["variant"]), _e(weights),
                            _e(f"{fit['fitted_on']} ({fit['n_fit']})")])
    if not members:
        return ""
    out = ["<h3>Ensembles</h3>", _table(["model", "dataset", "ensemble", "variant", "members: weights",
                                         "fitted on"], members, left=6)]
    pairs = ensemble_pairs(runs, rows, n_boot)
    if pairs:
        out += ["<p class=muted>Best single detector vs best ensemble per scenario: test AUROC (mean over the "
                "scenario's datasets), Cost@N, and Δ = ensemble - single with a paired stratified bootstrap "
                f"({n_boot} resamples per dataset, averaged resample by resample).</p>",
                _table(PAIR_HEADER, [[_e(c) for c in pair_cells(p)] for p in pairs], left=3)]
    return "".join(out)
