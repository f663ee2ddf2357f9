"""Markdown and LaTeX renderings of the paper's tables from the tidy results.

* Table 2 (`scenario_table`): per backbone, detectors grouped by family, scenario columns and Overall.
* Table 9 (`dataset_table`): the same per dataset, with "<scenario> Avg." after multi-dataset scenarios.
* Table 11 (`cost_table`): per backbone, metric and cost columns averaged over datasets.

Metric values print in percent with two decimals, like the paper; the best detector of each column within a
backbone is bold; a mean over fewer datasets than the column holds is marked with a dagger; no value is a dash.
Coverage below 100% follows a value as "(NN%)"; a best value that ranks detectors of different coverage carries
"§"; detectors that ran with a substitute model or a non-default variant get numbered footnotes (`report.marks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from haldet.evaluation.aggregate import (
    FAMILY_AVG,
    FAMILY_TITLE,
    Table,
    backbone_summary,
    cost_table,
    dataset_table,
    scenario_table,
)
from haldet.evaluation.cost import usd_text
from haldet.evaluation.metrics import MAX_ORIENTATION, MAX_ORIENTATION_NOTE
from haldet.report.marks import (
    COVERAGE_NOTE,
    SUBSET_MARK,
    SUBSET_NOTE,
    Marks,
    coverage_suffix,
    detector_marks,
    mixed_coverage,
)

LOWER_IS_BETTER = {"fpr95", "aurc", "ece", "brier"}
METRIC_LABEL = {"auroc": "AUROC", "aupr": "AUPR", "fpr95": "FPR@95TPR", "prr": "PRR", "prr_50": "PRR@50%",
                "rej_auc": "rejection AUC", "aurc": "AURC", "ece": "ECE", "brier": "Brier"}
DAGGER_MD = "†"
DAGGER_TEX = r"$^\dagger$"


def _best(table: Table) -> dict[tuple[str, str], tuple[float, bool]]:
    """Best detector value per (model, column) (family rows excluded), and whether the detectors it was chosen
    among have different coverages (a ranking across item subsets)."""
    out: dict[tuple[str, str], float] = {}
    covs: dict[tuple[str, str], list[float | None]] = {}
    lower = table.metric in LOWER_IS_BETTER
    for r in table.rows:
        if r.kind != "detector":
            continue
        for key, agg in r.values.items():
            if agg.value is None:
                continue
            covs.setdefault((r.model, key), []).append(agg.coverage)
            cur = out.get((r.model, key))
            if cur is None or (agg.value < cur if lower else agg.value > cur):
                out[(r.model, key)] = agg.value
    return {k: (v, len(covs[k]) > 1 and mixed_coverage(covs[k])) for k, v in out.items()}


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.2f}"


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def tex_escape(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in str(text))


def table_cells(table: Table, bold: Callable[[str], str], dagger: str, subset: str = SUBSET_MARK,
                marks: Marks | None = None, ref: str = " [{}]") -> list[tuple[str, str, str, list[str]]]:
    """(model, family, label, formatted values) per row, in table order. With `marks`, a dataset column's value
    (or its dash: a thin cell has no value in the tables) carries that cell's own caveats (`ref` formats them)."""
    best = _best(table)
    out = []
    for r in table.rows:
        vals = []
        for col in table.columns:
            agg = r.values.get(col.key)
            own = (marks.cell_label(r.model, r.detector, col.key, ref)
                   if marks is not None and r.kind == "detector" and col.kind == "dataset" else "")
            if agg is None or agg.value is None:
                vals.append("—" + own)
                continue
            text = _pct(agg.value) + (dagger if agg.partial else "")
            top = best.get((r.model, col.key))
            if r.kind == "detector" and top is not None and top[0] == agg.value:
                text = bold(text) + (subset if top[1] else "")
            if r.kind == "detector":
                text += coverage_suffix(agg.coverage)
            vals.append(text + own)
        out.append((r.model, r.family, r.detector, vals))
    return out


def _notes(marks: Marks | None, fmt: str) -> list[str]:
    """The footnotes under a table: coverage and subset conventions, then the numbered detector marks."""
    return [COVERAGE_NOTE + ".", SUBSET_NOTE + ".", *(marks.lines(fmt) if marks else [])]


def table_markdown(table: Table, marks: Marks | None = None) -> str:
    header = ["Method", *[c.label for c in table.columns]]
    lines = [f"**{table.title}** ({METRIC_LABEL.get(table.metric, table.metric)} %, best per backbone in bold, "
             f"{DAGGER_MD} = mean over fewer datasets than the column holds)", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(table.columns)) + "|"]
    model = family = None
    for m, fam, label, vals in table_cells(table, lambda s: f"**{s}**", DAGGER_MD, marks=marks):
        if m != model:
            lines.append(f"| **{m}** |" + " |" * len(table.columns))
            model, family = m, None
        if fam != family:
            lines.append(f"| *{FAMILY_TITLE.get(fam, fam)}* |" + " |" * len(table.columns))
            family = fam
        name = f"*{label}*" if label == FAMILY_AVG else label + (marks.label(m, label) if marks else "")
        lines.append("| " + " | ".join([name, *vals]) + " |")
    lines += ["", *(f"{line}  " for line in _notes(marks, "[{n}] {text}"))]  # two spaces: a Markdown line break
    return "\n".join(lines) + "\n"


def table_latex(table: Table, label: str = "", marks: Marks | None = None) -> str:
    n = len(table.columns)
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{tex_escape(table.title)}. {METRIC_LABEL.get(table.metric, table.metric)} (\%); best per "
             rf"backbone in bold; {DAGGER_TEX} mean over fewer datasets than the column holds.}}"]
    if label:
        lines.append(rf"\label{{{label}}}")
    lines += [r"\begin{tabular}{l" + "r" * n + "}", r"\toprule",
              " & ".join(["Method", *[tex_escape(c.label) for c in table.columns]]) + r" \\", r"\midrule"]
    model = family = None
    for m, fam, det, vals in table_cells(table, lambda s: rf"\textbf{{{s}}}", DAGGER_TEX, r"\S{}", marks=marks,
                                         ref=r"\textsuperscript{{{}}}"):
        if m != model:
            if model is not None:
                lines.append(r"\midrule")
            lines.append(rf"\multicolumn{{{n + 1}}}{{l}}{{\textbf{{{tex_escape(m)}}}}} \\")
            model, family = m, None
        if fam != family:
            lines.append(rf"\multicolumn{{{n + 1}}}{{l}}{{\textit{{{tex_escape(FAMILY_TITLE.get(fam, fam))}}}}} \\")
            family = fam
        name = rf"\textit{{{FAMILY_AVG}}}" if det == FAMILY_AVG else tex_escape(det) + (
            marks.label(m, det, r"\textsuperscript{{{}}}") if marks else "")
        vals = [v.replace("—", "--").replace("%", r"\%") for v in vals]
        lines.append(" & ".join([name, *vals]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [r"\par\footnotesize " + tex_escape(t).replace(tex_escape(SUBSET_MARK), r"\S{}")
              for t in _notes(marks, "[{n}] {text}")]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _num(v: Any, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


COST_HEADER = ("Method", "Family", "Evidence", "AUROC", "Cost@{n} (s)", "Score-only (s)", "Infer. (ms/item)",
               "Extra gen. calls", "Extra gen. tokens")


def _billed(entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some model is billed: a USD column (Cost@N in money) then follows Cost@N in seconds."""
    return any("usd_at_n" in e for e in entries)


def _cost_header(entries: Sequence[Mapping[str, Any]], n: int) -> list[str]:
    return [h.format(n=n) for h in COST_HEADER] + ([f"Cost@{n} (USD)"] if _billed(entries) else [])


def _cost_rows(entries: Sequence[Mapping[str, Any]], metric: str, marks: Marks | None = None,
               ref: str = " [{}]") -> list[tuple[str, list[str]]]:
    usd = _billed(entries)
    return [(e["model"], [str(e["detector"]) + (marks.label(e["model"], e["detector"], ref) if marks else ""),
                          str(e["family"]), str(e.get("evidence") or "—"),
                          _pct(e.get(metric)) + coverage_suffix(e.get("coverage")),
                          _num(e.get("cost_at_n"), ".2f"), _num(e.get("score_only_s"), ".3f"),
                          _num(None if e.get("infer_s_item") is None else 1000 * e["infer_s_item"], ".3f"),
                          _num(e.get("extra_calls_item"), ".1f"), _num(e.get("extra_tokens_item"), ".1f"),
                          *([usd_text(e["usd_at_n"]) if "usd_at_n" in e else "—"] if usd else [])])
            for e in entries]


def cost_markdown(rows: Sequence[Mapping[str, Any]], metric: str = "auroc", marks: Marks | None = None) -> str:
    entries = cost_table(rows, metric)
    n = next((e["cost_n"] for e in entries if e.get("cost_n")), 100)
    header = _cost_header(entries, n)
    header[3] = METRIC_LABEL.get(metric, metric)
    lines = [f"**Detector cost (Table 11 layout)**: means over datasets; Cost@{n} = artifact-inclusive seconds for "
             f"{n} items (evidence stages beyond the primary answer + fitting + scoring); extra generations are "
             "counted per item beyond the primary answer.", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]
    model = None
    for m, vals in _cost_rows(entries, metric, marks):
        if m != model:
            lines.append(f"| **{m}** |" + " |" * (len(header) - 1))
            model = m
        lines.append("| " + " | ".join(vals) + " |")
    lines += ["", *(f"{line}  " for line in [COVERAGE_NOTE + ".", *(marks.lines() if marks else [])])]
    return "\n".join(lines) + "\n"


def cost_latex(rows: Sequence[Mapping[str, Any]], metric: str = "auroc", marks: Marks | None = None) -> str:
    entries = cost_table(rows, metric)
    n = next((e["cost_n"] for e in entries if e.get("cost_n")), 100)
    header = [tex_escape(h) for h in _cost_header(entries, n)]
    header[3] = METRIC_LABEL.get(metric, metric)
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{Detector cost, means over datasets. Cost@{n}: artifact-inclusive seconds for {n} items. "
             r"Extra generation calls and tokens per item beyond the primary answer.}",
             r"\begin{tabular}{lll" + "r" * (len(header) - 3) + "}", r"\toprule", " & ".join(header) + r" \\",
             r"\midrule"]
    model = None
    for m, vals in _cost_rows(entries, metric, marks):
        if m != model:
            if model is not None:
                lines.append(r"\midrule")
            lines.append(rf"\multicolumn{{{len(header)}}}{{l}}{{\textbf{{{tex_escape(m)}}}}} \\")
            model = m
        lines.append(" & ".join(tex_escape(v) if v != "—" else "--" for v in vals) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [r"\par\footnotesize " + tex_escape(t) for t in [COVERAGE_NOTE + ".", *(marks.lines() if marks else [])]]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def backbone_markdown(rows: Sequence[Mapping[str, Any]], metric: str = "auroc") -> str:
    summary = backbone_summary(rows, metric)
    fams = [f for f in ("black", "gray", "white") if any(f in s for s in summary)]
    lines = [f"**Per backbone** ({METRIC_LABEL.get(metric, metric)} %, Overall means)", "",
             "| Backbone | " + " | ".join(f"{f}-box" for f in fams) + " | all detectors | best detector | datasets |",
             "|---|" + "---:|" * (len(fams) + 1) + "---|---:|"]
    for s in summary:
        best = (f"{s['best_detector']} ({_pct(s['best_value'])})" + (SUBSET_MARK if s.get("mixed_coverage") else "")
                if s["best_detector"] else "—")
        lines.append(f"| {s['model']} | " + " | ".join(_pct(s.get(f)) for f in fams)
                     + f" | {_pct(s['all'])} | {best} | {s['n_datasets']} |")
    return "\n".join(lines) + "\n"


def _extra(rows: Sequence[Mapping[str, Any]], metric: str, metrics: Sequence[str]) -> list[str]:
    """The further metrics asked for that some row holds (`--metrics`), each once."""
    present = {str(r.get("metric")) for r in rows}
    return [m for m in dict.fromkeys(metrics) if m != metric and m in present]


def oriented_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The honest AUROC beside `auroc_max_orientation` per (model, dataset, detector), when the run asked for it:
    no bold, no average, no rank, and the footnote saying what it is ('' when no row holds it)."""
    oriented = {(r["model"], r["dataset"], r["detector"], r.get("level")): r for r in rows
                if r.get("metric") == MAX_ORIENTATION}
    if not oriented:
        return ""
    honest = {(r["model"], r["dataset"], r["detector"], r.get("level")): r for r in rows if r.get("metric") == "auroc"}
    lines = ["**AUROC oriented on the test labels** (%, the convention of the OpenHalDet paper's tables; "
             "shown for comparison with the paper, never ranked or averaged)", "",
             "| Backbone | Dataset | Method | AUROC | AUROC max-or.* |", "|---|---|---|---:|---:|"]
    for key, row in oriented.items():
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {_pct((honest.get(key) or {}).get('value'))} | "
                     f"{_pct(row.get('value'))} |")
    lines += ["", f"\\* max-or. = `{MAX_ORIENTATION}`: max(AUROC, 1 - AUROC), {MAX_ORIENTATION_NOTE}."]
    return "\n".join(lines) + "\n"


def all_markdown(rows: Sequence[Mapping[str, Any]], metric: str = "auroc", metrics: Sequence[str] = (),
                 header: Sequence[str] = ()) -> str:
    """Tables 2, 9 and 11 and the backbone summary for `metric`, then a Table 2 layout per metric in `metrics`, then
    the oriented-AUROC table when the run asked for it; `header`: lines above them (the run's preset)."""
    marks = detector_marks(rows)
    parts = [*(f"{line}  " for line in header), "" if header else None, backbone_markdown(rows, metric),
             table_markdown(scenario_table(rows, metric), marks), table_markdown(dataset_table(rows, metric), marks),
             cost_markdown(rows, metric, marks),
             *(table_markdown(scenario_table(rows, m), marks) for m in _extra(rows, metric, metrics)),
             oriented_markdown(rows) or None]
    return "\n".join(p for p in parts if p is not None)


def all_latex(rows: Sequence[Mapping[str, Any]], metric: str = "auroc", metrics: Sequence[str] = ()) -> str:
    marks = detector_marks(rows)
    return "\n".join([table_latex(scenario_table(rows, metric), "tab:haldet-scenario", marks),
                      table_latex(dataset_table(rows, metric), "tab:haldet-dataset", marks),
                      cost_latex(rows, metric, marks),
                      *(table_latex(scenario_table(rows, m), f"tab:haldet-scenario-{m}", marks)
                        for m in _extra(rows, metric, metrics))])
