"""The self-contained HTML report: one file, inline CSS and SVG, no script and no network.

Sections: per-backbone summary, results (AUROC with CI, AUPR, FPR@95, N, positives, coverage, Cost@N), the
Table 2 layout, a scenario x detector heatmap, AUROC vs Cost@N on a log axis coloured by evidence type (the
paper's Figure 2), ROC and precision-recall curves per dataset from the cached test scores, paired comparisons
against the best detector of each cell, rejection/calibration metrics with risk-coverage curves, reliability
diagrams and ensembles (`report.deployment`), failures, and the run metadata (config, versions, stage timings,
evidence cost). Every figure is drawn by `haldet.figures` into the `FigureSet` passed in, which also keeps its PDF
and PNG for the report's figures/ folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import numpy as np
from sklearn.metrics import precision_recall_curve, roc_curve

from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError
from haldet.evaluation.aggregate import (
    FAMILY_TITLE,
    backbone_summary,
    cost_table,
    mean_of,
    scenario_group,
    scenario_table,
)
from haldet.evaluation.compare import paired_bootstrap
from haldet.evaluation.cost import usd_text
from haldet.evaluation.metrics import MAX_ORIENTATION, MAX_ORIENTATION_NOTE, aupr, auroc
from haldet.figures.charts import cost_scatter, heatmap, scatter_figure
from haldet.figures.curves import MAX_POINTS, curve_figure
from haldet.figures.data import PR, ROC, Curve, Point, Scatter
from haldet.figures.render import FigureSet
from haldet.figures.style import EVIDENCE_COLOURS
from haldet.report.deployment import deployment_section
from haldet.report.learned import learned_html
from haldet.report.marks import COVERAGE_NOTE, SUBSET_NOTE, Marks, coverage_suffix, detector_marks
from haldet.report.rundata import RunData, preset_lines, skipped_in_runs, skipped_lines
from haldet.report.tables import table_cells
from haldet.store.reader import RunReader
from haldet.suites.base import get_suite
from haldet.version import __version__

CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}h3{font-size:15px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right}th{background:#f2f2f2}
td.l,th.l{text-align:left}tr.fam td{background:#f7f7f7;font-style:italic}
tr.model td{background:#e8eef7;font-weight:bold}
.muted{color:#777}.err{color:#b00}.figs{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
figure{margin:0}tr.inside td{background:#eef6ee}tr.outside td{background:#fbeeee}
pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:11px;max-height:400px}
"""
MAX_CURVES = 18
FEW_CURVES = 4  # up to this many ROC curves share one plot; more get a small panel each


def _e(text: Any) -> str:
    return escape(str(text), quote=True)


def _pct(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{100 * float(v):.{digits}f}"


def _num(v: Any, fmt: str = ".3g") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return format(float(v), fmt)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1,
           classes: Sequence[str] | None = None) -> str:
    """An HTML table; cells are already-escaped HTML; the first `left` columns are left-aligned."""
    head = "".join(f'<th class="l">{h}</th>' if i < left else f"<th>{h}</th>" for i, h in enumerate(header))
    body = []
    for k, row in enumerate(rows):
        cls = f' class="{classes[k]}"' if classes and classes[k] else ""
        body.append(f"<tr{cls}>" + "".join(f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>"
                                           for i, c in enumerate(row)) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _by_metric(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], dict[str, Mapping[str, Any]]]:
    out: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault((str(r["model"]), str(r["dataset"]), str(r["detector"])), {})[str(r["metric"])] = r
    return out


def _sup(marks: Marks, model: str, detector: str, dataset: str | None = None, run: str | None = None) -> str:
    """A detector's footnote references as a superscript ('' when none); one cell's when `dataset` is given."""
    return marks.label(model, detector, "<sup>{}</sup>", dataset=dataset, run=run)


def _footnotes(marks: Marks, *notes: str) -> str:
    lines = [*(_e(n) for n in notes), *(_e(line) for line in marks.lines())]
    return "".join(f"<p class=muted>{line}</p>" for line in lines)


def results_section(rows: Sequence[Mapping[str, Any]]) -> str:
    marks = detector_marks(rows)
    body = []
    n_cost = next((r.get("cost_n") for r in rows if r.get("cost_n")), 100)
    oriented = any(r.get("metric") == MAX_ORIENTATION for r in rows)
    for (model, dataset, det), m in _by_metric(rows).items():
        au = m.get("auroc", {})
        ci = (f' <span class="muted">[{_pct(au.get("ci_low"), 1)}, {_pct(au.get("ci_high"), 1)}]</span>'
              if au.get("ci_low") is not None else "")
        sup = _sup(marks, model, det, dataset, str(au.get("run") or ""))
        body.append([_e(model), _e(dataset), _e(au.get("scenario", "")), _e(det) + sup,
                     _e(au.get("family", "")),
                     _pct(au.get("value")) + ci,
                     *([_pct(m.get(MAX_ORIENTATION, {}).get("value"))] if oriented else []),
                     _pct(m.get("aupr", {}).get("value")),
                     _pct(m.get("fpr95", {}).get("value")), _e(au.get("n", "")), _e(au.get("n_pos", "")),
                     _pct(au.get("coverage"), 0) + "%" if au.get("coverage") is not None else "—",
                     _num(au.get("cost_at_n")), _e(au.get("evidence") or ""), _e(au.get("note") or "")])
    header = ["model", "dataset", "scenario", "detector", "family", "AUROC [95% CI]",
              *(["AUROC max-or.*"] if oriented else []), "AUPR", "FPR@95", "N", "pos", "coverage",
              f"Cost@{n_cost} (s)", "evidence", "note"]
    notes = [f"* max-or. = {MAX_ORIENTATION}: max(AUROC, 1 - AUROC), {MAX_ORIENTATION_NOTE}"] if oriented else []
    return "<h2 id=results>Results (test split)</h2>" + _table(header, body, left=5) + _footnotes(marks, *notes)


def summary_section(rows: Sequence[Mapping[str, Any]]) -> str:
    summary = backbone_summary(rows)
    fams = [f for f in ("black", "gray", "white") if any(f in s for s in summary)]
    body = [[_e(s["model"]), *[_pct(s.get(f)) for f in fams], _pct(s["all"]),
             f"{_e(s['best_detector'])} ({_pct(s['best_value'])})" + ("§" if s.get("mixed_coverage") else "")
             if s["best_detector"] else "—",
             _e(s["n_datasets"])] for s in summary]
    header = ["backbone", *[f"{f}-box" for f in fams], "all detectors", "best detector", "datasets"]
    return ("<h2 id=summary>Summary per backbone</h2><p class=muted>AUROC (%), mean over datasets "
            "(family columns: mean over the family's detectors).</p>" + _table(header, body, left=1))


def scenario_section(rows: Sequence[Mapping[str, Any]], figures: FigureSet | None = None) -> str:
    figures = figures if figures is not None else FigureSet(formats=())
    table = scenario_table(rows)
    marks = detector_marks(rows)
    cells = table_cells(table, lambda v: f"<b>{v}</b>", "†")
    header = ["Method", *[_e(c.label) for c in table.columns]]
    body, classes = [], []
    model = family = None
    for k, r in enumerate(table.rows):
        if r.model != model:
            body.append([_e(r.model)] + [""] * len(table.columns))
            classes.append("model")
            model, family = r.model, None
        if r.family != family:
            body.append([_e(FAMILY_TITLE.get(r.family, r.family))] + [""] * len(table.columns))
            classes.append("fam")
            family = r.family
        body.append([_e(r.detector) + (_sup(marks, r.model, r.detector) if r.kind == "detector" else "")]
                    + cells[k][3])  # numbers and marks only: nothing to escape
        classes.append("fam" if r.kind == "family" else "")
    heat = []
    for model in table.models():
        det_rows = [r for r in table.rows if r.model == model and r.kind == "detector"]
        cols = [c for c in table.columns if any(c.key in r.values for r in det_rows)]
        title = f"AUROC (%) by scenario: {model}"
        heat.append(figures.add(f"heatmap-{model}", heatmap(
            [r.detector for r in det_rows], [c.label for c in cols],
            [[r.values[c.key].value if c.key in r.values else None for c in cols] for r in det_rows],
            title=title), title))
    return ("<h2 id=scenarios>AUROC by scenario (Table 2 layout)</h2><p class=muted>QA averages every qa_* "
            "dataset; multi-dataset scenarios average their datasets; Overall is the mean over datasets; "
            "† = mean over fewer datasets than the column holds; the best detector per backbone in bold.</p>"
            + _table(header, body, left=1, classes=classes) + _footnotes(marks, COVERAGE_NOTE, SUBSET_NOTE)
            + "<h3>Scenario x detector heatmap</h3><div class=figs>" + "".join(heat) + "</div>")


def cost_section(rows: Sequence[Mapping[str, Any]], figures: FigureSet | None = None,
                 trains: Mapping[str, bool] | None = None) -> str:
    """The cost table and plots; `trains`: whether each detector trains, as the runs recorded it (`recorded_trains`;
    a detector it does not name is looked up in the registry)."""
    figures = figures if figures is not None else FigureSet(formats=())
    entries = cost_table(rows)
    n = next((e["cost_n"] for e in entries if e.get("cost_n")), 100)
    figs = []
    for model in dict.fromkeys(e["model"] for e in entries):
        pts = [Point(e.get("cost_at_n"), e.get("auroc"), str(e["detector"]), str(e.get("evidence") or "unknown"))
               for e in entries if e["model"] == model]
        title = f"AUROC vs Cost@{n}: {model} (all datasets)"
        figs.append(figures.add(f"cost-{model}", cost_scatter(pts, title=title, xlabel=f"Cost@{n} (s, log scale)",
                                                              colours=EVIDENCE_COLOURS), title))
        by_group: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
        for r in rows:
            if r.get("metric") == "auroc" and r["model"] == model:
                by_group.setdefault(scenario_group(str(r.get("scenario", "?"))), {}).setdefault(
                    str(r["detector"]), []).append(r)
        if len(by_group) > 1:
            for group, dets in by_group.items():
                gpts = [Point(mean_of(_f(m.get("cost_at_n")) for m in ms).value,
                              mean_of(_f(m.get("value")) for m in ms).value, det,
                              str(ms[0].get("evidence") or "unknown")) for det, ms in dets.items()]
                figs.append(figures.add(f"cost-{group}-{model}", cost_scatter(
                    gpts, title=f"{group}: {model}", xlabel=f"Cost@{n} (s, log scale)", colours=EVIDENCE_COLOURS),
                    f"AUROC vs Cost@{n}, {group}: {model}"))
    marks = detector_marks(rows)
    billed = any("usd_at_n" in e for e in entries)  # an API model's money for the same N items, beside the seconds
    body = [[_e(e["model"]), _e(e["detector"]) + _sup(marks, e["model"], e["detector"]), _e(e["family"]),
             _e(e.get("evidence") or "—"), _pct(e.get("auroc")) + coverage_suffix(e.get("coverage")),
             _num(e.get("cost_at_n")), _num(e.get("prep_s_item")), _fit(e, trains or {}), _num(e.get("score_only_s")),
             _num(None if e.get("infer_s_item") is None else 1000 * e["infer_s_item"]),
             _num(e.get("extra_calls_item"), ".2f"), _num(e.get("extra_tokens_item"), ".1f"),
             *([_e(usd_text(e["usd_at_n"]) if "usd_at_n" in e else "—")] if billed else [])] for e in entries]
    header = ["model", "detector", "family", "evidence", "AUROC", f"Cost@{n} (s)", "evidence s/item", "fit (s)",
              "score-only (s)", "infer. (ms/item)", "extra gen. calls/item", "extra gen. tokens/item",
              *([f"Cost@{n} (USD)"] if billed else [])]
    return (f"<h2 id=cost>Accuracy and cost (Figure 2, Table 11)</h2><p class=muted>Cost@{n}: artifact-inclusive "
            f"seconds for {n} items = {n} x (seconds per item of every evidence stage the detector reads beyond the "
            f"primary answer) + fitting + {n} x scoring seconds per item; means over datasets. Extra generations are "
            "counted per item beyond the primary answer.</p><div class=figs>" + "".join(figs) + "</div>"
            + _table(header, body, left=4) + _footnotes(marks, COVERAGE_NOTE))


def _fit(entry: Mapping[str, Any], recorded: Mapping[str, bool]) -> str:
    """Fit seconds, or "-" for a detector that does not train (its "fit" is only bookkeeping, not a cost)."""
    trains = recorded.get(str(entry["detector"]))
    if trains is None:
        trains = format2_trains(str(entry["detector"]))
    return _num(entry.get("fit_s")) if trains else "-"


def recorded_trains(runs: Sequence[RunData]) -> dict[str, bool]:
    """Whether each detector of the runs trains, as their manifests recorded it at run time (so a report needs no
    detector registry, which imports every detector and torch)."""
    out: dict[str, bool] = {}
    for run in runs:
        for cell in run.cells():
            for det in cell.get("detectors") or []:
                if det.get("trains") is not None:
                    out.setdefault(str(det.get("name")), bool(det["trains"]))
    return out


def format2_trains(detector: str) -> bool:
    """Manifests before run_format 3 did not record whether a detector trains: the registry says (importing every
    detector module); a plugin detector not installed here counts as trained (its recorded seconds are shown)."""
    try:
        return DETECTORS.get(detector).trains
    except HaldetError:
        return True


def _p(p: float | None, n_boot: int) -> str:
    """A bootstrap p of 0 only says p < 1/resamples."""
    if p is None:
        return "—"
    return f"&lt;{1 / n_boot:.2g}" if p == 0 else f"{p:.3f}"


def _f(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def cell_curves(labels: np.ndarray, scores: Mapping[str, np.ndarray]) -> tuple[list[Curve], list[Curve]]:
    """ROC and precision-recall curves (sklearn's points) of each detector on the items it scored validly, with
    its AUROC and AUPR; a detector whose valid items hold one class only has neither."""
    roc, pr = [], []
    for det, s in list(scores.items())[:MAX_CURVES]:
        ok = np.isfinite(s)
        y = labels[ok]
        if len(set(y.tolist())) < 2:
            continue
        fpr, tpr, _ = roc_curve(y, s[ok])
        roc.append(Curve(det, fpr.tolist(), tpr.tolist(), auroc(y, s[ok])))
        precision, recall, _ = precision_recall_curve(y, s[ok])
        pr.append(Curve(det, recall.tolist(), precision.tolist(), aupr(y, s[ok])))
    return roc, pr


def roc_section(runs: Sequence[RunData], rows: Sequence[Mapping[str, Any]], n_boot: int,
                figures: FigureSet | None = None) -> str:
    figures = figures if figures is not None else FigureSet(formats=())
    wanted = {(str(r["dataset"]), str(r["model"])) for r in rows}
    dets_by_cell: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.get("metric") == "auroc":
            dets_by_cell.setdefault((str(r["dataset"]), str(r["model"])), [])
            if r["detector"] not in dets_by_cell[(str(r["dataset"]), str(r["model"]))]:
                dets_by_cell[(str(r["dataset"]), str(r["model"]))].append(str(r["detector"]))
    figs, pr_figs, comparisons = [], [], []
    seen: set[tuple[str, str]] = set()
    for run in reversed(runs):  # a cell in several runs: the later run's scores, as in the merged table
        for cell in run.cells():
            key = (str(cell.get("dataset")), str(cell.get("model")))
            if key in seen or key not in wanted or cell.get("error"):
                continue
            seen.add(key)
            data = run.cell_scores(key[0], key[1], dets_by_cell.get(key))
            if data is None or len(set(data.labels.tolist())) < 2:
                continue
            curves, pr_curves = cell_curves(data.labels, data.scores)
            title = f"{key[0]} | {key[1]} (N={len(data.ids)}, pos={int(data.labels.sum())})"
            figs.append(figures.add(f"roc-{key[0]}-{key[1]}", curve_figure(
                curves, kind=ROC, title=title, few=FEW_CURVES), f"ROC: {title}"))
            pr_figs.append(figures.add(f"pr-{key[0]}-{key[1]}", curve_figure(
                pr_curves, kind=PR, title=title, few=FEW_CURVES, baseline=float(data.labels.mean())),
                f"Precision-recall: {title}"))
            best = max(curves, key=lambda c: c.value or 0.0, default=None)
            if best is None:
                continue
            cache: dict[Any, Any] = {}
            for c in curves:
                if c.name == best.name:
                    continue
                cmp = paired_bootstrap(data.labels, data.scores[best.name], data.scores[c.name], a=best.name,
                                       b=c.name, n_boot=n_boot, _cache=cache)
                ci = f"[{_pct(cmp.ci_low, 1)}, {_pct(cmp.ci_high, 1)}]" if cmp.ci_low is not None else "—"
                comparisons.append([_e(key[0]), _e(key[1]), _e(best.name), _e(c.name), _e(cmp.n),
                                    _pct(cmp.diff), ci, _p(cmp.p_value, n_boot), _e(cmp.note)])
    out = ("<h2 id=roc>ROC curves per dataset</h2><p class=muted>Test-split scores as cached by the run "
           "(scores/&lt;detector&gt;.jsonl); items with an invalid score are left out of that detector's curve; "
           f"a curve of more than {MAX_POINTS} points is drawn through {MAX_POINTS} of them, evenly spaced along it."
           "</p><div class=figs>" + ("".join(figs) or "<p>no cell has cached test scores</p>") + "</div>")
    if pr_figs:
        out += ("<h3>Precision-recall curves</h3><p class=muted>Precision (share of hallucinations among the answers "
                "flagged) against recall; dashed: the share of hallucinations, a random detector's precision; AUPR "
                "is the average precision.</p><div class=figs>" + "".join(pr_figs) + "</div>")
    out += ("<h3>Paired comparison with the best detector of each cell</h3><p class=muted>AUROC difference "
            f"(best minus other, %) on items both scored, stratified paired bootstrap ({n_boot} resamples), "
            "95% CI and two-sided bootstrap p.</p>")
    out += _table(["dataset", "model", "best", "other", "N", "ΔAUROC", "95% CI", "p", "note"], comparisons,
                  left=4) if comparisons else "<p>no comparison (fewer than two scored detectors)</p>"
    return out


def failures_section(runs: Sequence[RunData]) -> str:
    items = []
    for run in runs:
        for cell in run.cells():
            where = f"{_e(cell.get('dataset'))} | {_e(cell.get('model'))}"
            if cell.get("error"):
                items.append(f"<li class=err>{_e(run.name)}: cell {where} failed: {_e(cell['error'])}</li>")
            for d in cell.get("detectors") or []:
                if d.get("error"):
                    items.append(f"<li class=err>{_e(run.name)}: detector {_e(d.get('name'))} on {where}: "
                                 f"{_e(d['error'])}</li>")
    return "<h2 id=failures>Failures</h2>" + (f"<ul>{''.join(items)}</ul>" if items else "<p>none</p>")


def metadata_section(runs: Sequence[RunData]) -> str:
    parts = ["<h2 id=metadata>Run metadata</h2>"]
    for run in runs:
        m = run.manifest
        cfg = m.get("config") or {}
        parts.append(f"<h3>{_e(run.name)}</h3>")
        facts = [["run directory", _e(run.root)], ["status", _e(m.get("status", "?"))],
                 ["created", _e(m.get("created", "?"))], ["finished", _e(m.get("finished", "—"))],
                 ["wall time (s)", _e(m.get("seconds", "—"))], ["config hash", _e(m.get("config_hash", "?"))],
                 ["models", _e(", ".join(cfg.get("models") or []))],
                 ["datasets", _e(", ".join(cfg.get("datasets") or []))],
                 ["detectors", _e(", ".join(cfg.get("detectors") or []))],
                 ["versions", _e(", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items()))]]
        parts.append(_table(["field", "value"], facts, left=2))
        cell_rows = []
        for c in run.cells():
            ev = c.get("evidence") or {}
            ev_text = "; ".join(f"{k}: {_num(v.get('seconds_per_item'))} s/item" for k, v in ev.items())
            cell_rows.append([_e(c.get("dataset")), _e(c.get("model")),
                              _e(json.dumps(c.get("labels") or {}, sort_keys=True)),
                              _e(json.dumps(c.get("split") or {}, sort_keys=True)),
                              _e(", ".join(f"{k} {float(v):.2f}" for k, v in (c.get("stage_seconds") or {}).items())),
                              _e(ev_text), f"<span class=err>{_e(c.get('error'))}</span>" if c.get("error") else ""])
        parts.append(_table(["dataset", "model", "labels", "split", "stage wall time this run (s)",
                             "evidence cost", "error"], cell_rows, left=7))
        parts.append("<details><summary>resolved config</summary><pre>"
                     + _e(json.dumps(cfg, indent=2, sort_keys=True)) + "</pre></details>")
    return "".join(parts)


def suite_sections(runs: Sequence[RunData], rows: Sequence[Mapping[str, Any]],
                   figures: FigureSet | None = None) -> str:
    """Each hosted benchmark's own tables and plots (`Suite.html_section`) for the runs made with `--suite`."""
    names = sorted({str(r.manifest.get("config", {}).get("suite")) for r in runs
                    if r.manifest.get("config", {}).get("suite")})
    parts = []
    for name in names:
        suite = get_suite(name)
        parts.append(suite.html_section([dict(r) for r in rows if r.get("dataset") in suite.datasets],
                                        figures=figures))
        for run in runs:  # what a suite draws from a run's stored evidence (read through the run's reader)
            if run.manifest.get("config", {}).get("suite") == name:
                parts += [run_plot(plot, figures) for plot in suite.run_plots(RunReader(run.root), run.data_labels)]
    return "\n".join(p for p in parts if p)


def run_plot(plot: Scatter, figures: FigureSet | None) -> str:
    """One plot a suite computed from a run's evidence (`Suite.run_plots`), drawn, with its note under it."""
    figures = figures if figures is not None else FigureSet(formats=())
    note = f"<p class=muted>{_e(plot.note)}</p>" if plot.note else ""
    return f"<div class=figs>{figures.add(plot.name, scatter_figure(plot), plot.title)}</div>{note}"


def build_html(runs: Sequence[RunData], rows: Sequence[Mapping[str, Any]], *, title: str = "haldet report",
               n_boot: int = 1000, figures: FigureSet | None = None, paper: str = "") -> str:
    """The whole report as one HTML string (rows: the merged tidy results of `runs`). Its figures are drawn into
    `figures` (by default one that keeps only the SVG the page embeds); `paper`: the section putting a paper's
    numbers beside ours (`haldet.report.paper_html`), after the results."""
    figures = figures if figures is not None else FigureSet(formats=())
    nav = " · ".join(f'<a href="#{a}">{t}</a>' for a, t in [
        ("summary", "summary"), ("results", "results"), *([("paper", "paper")] if paper else []),
        ("scenarios", "scenarios"), ("cost", "cost"),
        ("roc", "ROC/PR"), ("deploy", "rejection/calibration/ensembles"), ("failures", "failures"),
        ("metadata", "metadata")])
    body = [f"<h1>{_e(title)}</h1>",
            f"<p class=muted>runs: {_e(', '.join(r.name for r in runs))} · haldet {_e(__version__)} · "
            f"{len(rows)} result rows</p>", *(f"<p><b>{_e(line)}</b></p>" for line in preset_lines(runs)),
            f"<p>{nav}</p>"]
    skipped = skipped_in_runs(runs, rows)
    if skipped:  # said first: a reader looking for a paper's detector learns at once that it was left out
        body.append("<p class=muted>" + "<br>".join(_e(line) for line in skipped_lines(skipped)) + "</p>")
    if rows:
        body += [summary_section(rows), results_section(rows), paper, scenario_section(rows, figures),
                 cost_section(rows, figures, recorded_trains(runs)), roc_section(runs, rows, n_boot, figures),
                 deployment_section(runs, rows, n_boot, figures)]
    else:
        body += ["<p>No result rows: every cell failed or no detector ran (see failures).</p>", paper]
    body += [suite_sections(runs, rows, figures), learned_html([c for r in runs for c in r.cells()]),
             failures_section(runs), metadata_section(runs)]
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f"<meta name=viewport content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<link rel=icon href=\"data:,\"><style>{CSS}</style></head><body>" + "\n".join(body)
            + "</body></html>\n")
