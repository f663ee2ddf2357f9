"""A run's numbers beside a paper's (`haldet report RUN --paper NAME`).

A result row is compared with a paper row only when it is the same cell: dataset, detector and metric (the paper's
convention: OpenHalDet's AUROCs are oriented on the test labels, so ours is max(AUROC, 1 - AUROC) of the honest row,
its CI flipped with it, as appendix J fixes the orientation before its bootstrap), the paper's model (an empty
paper model: any), the detector variant the paper ran (the preset's), no substituted auxiliary model, and every
qualifier the paper row carries (a result-row field such as `train_labels`, or `config.<path>` of the run's
config). A row that fails any of these is listed with the reason, never compared. The comparison says: the
paper's value, ours with its CI, ours minus the paper's, and whether the paper's value lies inside our CI.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haldet.evaluation.metrics import MAX_ORIENTATION
from haldet.papers import PaperRow, paper_rows
from haldet.presets import load_preset, preset_names

Row = Mapping[str, Any]
MATCH_COLUMNS = ("table", "dataset", "model", "detector", "metric", "paper", "ours", "ci_low", "ci_high", "diff",
                 "inside_ci", "n", "convention")
MISS_COLUMNS = ("dataset", "model", "detector", "metric", "reason")


def model_key(name: str) -> str:
    """A model name compared across spellings: the last path part, lower case, without a client prefix
    (`openai:`, `llm:`, `hf:`)."""
    name = name.strip().lower()
    for prefix in ("openai:", "llm:", "hf:"):
        name = name.removeprefix(prefix)
    return name.rstrip("/").rsplit("/", 1)[-1]


def config_value(config: Mapping[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def paper_variants(paper: str) -> dict[str, str]:
    """The detector variants the paper ran: the variants its preset sets."""
    if paper not in preset_names():
        return {}
    params = load_preset(paper).settings.get("detector_params") or {}
    return {det: str(p["variant"]) for det, p in params.items() if isinstance(p, Mapping) and "variant" in p}


@dataclass
class Comparison:
    paper: str
    matched: list[dict[str, Any]] = field(default_factory=list)
    unmatched: list[dict[str, Any]] = field(default_factory=list)
    other_metrics: dict[str, int] = field(default_factory=dict)  # result rows of metrics the paper never reports
    paper_total: int = 0


def _ours(row: Row, paper_metric: str) -> tuple[float | None, float | None, float | None]:
    value, lo, hi = row.get("value"), row.get("ci_low"), row.get("ci_high")
    if value is None or paper_metric != MAX_ORIENTATION:
        return value, lo, hi
    if value >= 0.5:
        return value, lo, hi
    return 1.0 - value, None if hi is None else 1.0 - hi, None if lo is None else 1.0 - lo


def _source_metric(paper_metric: str) -> str:
    return "auroc" if paper_metric == MAX_ORIENTATION else paper_metric


def _qualifier_misses(prow: PaperRow, row: Row, config: Mapping[str, Any]) -> list[str]:
    misses = []
    for key, want in prow.qualifiers.items():
        if key.startswith("config."):
            have = config_value(config, key.removeprefix("config."))
            if have is None or model_key(str(have)) != model_key(want):
                misses.append(f"{key} is {have!r}, the paper's row is for {want!r}")
        elif str(row.get(key) or "") != want:
            misses.append(f"{key} is {row.get(key)!r}, the paper's row is for {want!r}")
    return misses


def _why_not(candidates: Sequence[PaperRow], row: Row, config: Mapping[str, Any], variant: str | None) -> str:
    model = str(row.get("model") or "")
    by_model = [p for p in candidates if not p.model or model_key(p.model) == model_key(model)]
    if not by_model:
        models = sorted({p.model for p in candidates})
        return (f"another model: the paper reports this cell for {', '.join(models)}, not {model!r} "
                f"(a substitute or another backbone is never compared)")
    if row.get("substitute"):
        return f"a substituted auxiliary model ({row['substitute']}): not the paper's setting"
    if variant and row.get("variant") and str(row["variant"]) != variant:
        return f"detector variant {row['variant']!r}; the paper ran {variant!r} (its preset's variant)"
    misses = [_qualifier_misses(p, row, config) for p in by_model]
    return "; ".join(sorted(set(misses[0]))) if misses and misses[0] else "no paper row fits"


def compare(paper: str, rows: Sequence[Row], configs: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
            default_config: Mapping[str, Any] | None = None) -> Comparison:
    """Compare result rows with a paper's rows. `configs`: the run config of each (dataset, model) cell (for
    `config.` qualifiers); `default_config` for a cell not in it."""
    prows = [p for p in paper_rows(paper) if p.mapped]
    out = Comparison(paper=paper, paper_total=len(paper_rows(paper)))
    variants = paper_variants(paper)
    by_cell: dict[tuple[str, str, str], list[PaperRow]] = {}
    for p in prows:
        by_cell.setdefault((p.dataset, p.detector, _source_metric(p.metric)), []).append(p)
    metrics_of: dict[tuple[str, str], set[str]] = {}
    for p in prows:
        metrics_of.setdefault((p.dataset, p.detector), set()).add(p.metric)
    paper_metrics = {_source_metric(p.metric) for p in prows}
    oriented = any(p.metric == MAX_ORIENTATION for p in prows)
    for row in rows:
        metric = str(row.get("metric") or "")
        if metric == MAX_ORIENTATION and oriented:
            continue  # compared through the honest AUROC row it was derived from, whose CI flips with it
        base = {"dataset": row.get("dataset"), "model": row.get("model"), "detector": row.get("detector"),
                "metric": metric}
        if metric not in paper_metrics:
            out.other_metrics[metric] = out.other_metrics.get(metric, 0) + 1
            continue
        candidates = by_cell.get((str(row.get("dataset")), str(row.get("detector")), metric), [])
        if not candidates:
            reported = metrics_of.get((str(row.get("dataset")), str(row.get("detector"))))
            reason = ("the paper reports no such cell (this detector on this dataset is not in its tables)"
                      if not reported else f"the paper reports {', '.join(sorted(reported))} for this cell, "
                                           f"not {metric}")
            out.unmatched.append({**base, "reason": reason})
            continue
        config = (configs or {}).get((str(row.get("dataset")), str(row.get("model")))) or default_config or {}
        variant = variants.get(str(row.get("detector")))
        fits = [p for p in candidates
                if (not p.model or model_key(p.model) == model_key(str(row.get("model") or "")))
                and not row.get("substitute")
                and not (variant and row.get("variant") and str(row["variant"]) != variant)
                and not _qualifier_misses(p, row, config)]
        if not fits:
            out.unmatched.append({**base, "reason": _why_not(candidates, row, config, variant)})
            continue
        for p in fits:
            ours, lo, hi = _ours(row, p.metric)
            if ours is None:
                out.unmatched.append({**base, "reason": "no value in our run (" + str(row.get("note") or "NaN")
                                      + ")"})
                continue
            inside = None if lo is None or hi is None else bool(lo <= p.fraction <= hi)
            out.matched.append({"table": p.table, **base, "metric": p.metric, "paper": p.fraction, "ours": ours,
                                "ci_low": lo, "ci_high": hi, "diff": ours - p.fraction, "inside_ci": inside,
                                "n": row.get("n"), "convention": p.convention})
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:+.3f}" if value < 0 else f"{value:.3f}"
    return str(value)


def markdown(comp: Comparison) -> str:
    lines = [f"# Our numbers beside {comp.paper}'s", "",
             f"{len(comp.matched)} cells compared; {len(comp.unmatched)} result cells that cannot match "
             f"(listed with the reason, never compared); the paper reports {comp.paper_total} numbers "
             f"(`haldet/papers/data/{comp.paper}.csv`). Values on a 0..1 scale; diff = ours - paper; "
             f"'inside CI': the paper's value lies inside our 95% CI.", ""]
    if comp.matched:
        lines += ["| table | dataset | model | detector | metric | paper | ours [95% CI] | diff | inside CI | n |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for m in comp.matched:
            ci = f" [{_fmt(m['ci_low'])}, {_fmt(m['ci_high'])}]" if m["ci_low"] is not None else " (no CI)"
            lines.append(f"| {m['table']} | {m['dataset']} | {m['model']} | {m['detector']} | {m['metric']} | "
                         f"{_fmt(m['paper'])} | {_fmt(m['ours'])}{ci} | {_fmt(m['diff'])} | "
                         f"{_fmt(m['inside_ci'])} | {m['n'] if m['n'] is not None else '—'} |")
        conventions = sorted({m["convention"] for m in comp.matched})
        lines += ["", "Conventions of the compared numbers: " + "; ".join(conventions) + "."]
    else:
        lines.append("**Nothing matches**: no result cell of this run is a cell the paper reports (reasons below).")
    if comp.unmatched:
        lines += ["", "## Cells that cannot match", "", "| dataset | model | detector | metric | reason |",
                  "|---|---|---|---|---|"]
        lines += [f"| {u['dataset']} | {u['model']} | {u['detector']} | {u['metric']} | {u['reason']} |"
                  for u in comp.unmatched]
    if comp.other_metrics:
        others = ", ".join(f"{k} ({v})" for k, v in sorted(comp.other_metrics.items()))
        lines += ["", f"Result rows of metrics the paper does not report (not compared): {others}."]
    return "\n".join(lines) + "\n"


def csv_text(comp: Comparison) -> str:
    """Compared and not-compared cells in one table (`status`: compared / not compared)."""
    handle = io.StringIO()
    writer = csv.DictWriter(handle, fieldnames=("status", *MATCH_COLUMNS, "reason"), lineterminator="\n")
    writer.writeheader()
    for m in comp.matched:
        writer.writerow({"status": "compared", **m, "reason": ""})
    for u in comp.unmatched:
        writer.writerow({"status": "not compared", **{k: u.get(k, "") for k in MISS_COLUMNS}})
    return handle.getvalue()


def write_comparison(out: Path, comp: Comparison) -> dict[str, Path]:
    """`paper_<name>.md` and `.csv` in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    md, table = out / f"paper_{comp.paper}.md", out / f"paper_{comp.paper}.csv"
    md.write_text(markdown(comp))
    table.write_text(csv_text(comp))
    return {"paper_md": md, "paper_csv": table}


def cell_configs(manifests: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The run config behind each (dataset, model) cell; a cell in several runs takes the later run's, as the
    merged results do."""
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for manifest in manifests:
        config = manifest.get("config") or {}
        for cell in manifest.get("cells") or []:
            out[(str(cell.get("dataset")), str(cell.get("model")))] = config
    return out


def compare_runs(paper: str, manifests: Sequence[Mapping[str, Any]], rows: Sequence[Row]) -> Comparison:
    """The comparison of the merged rows of runs with these manifests (each cell under its own run's config)."""
    return compare(paper, rows, cell_configs(manifests), default_config=manifests[-1].get("config") or {})


def report_paper(paper: str, run_dirs: Sequence[Path | str], rows: Sequence[Row],
                 out: Path) -> tuple[str, dict[str, Path]]:
    """`haldet report --paper`: compare the merged rows, write the two files, return the Markdown."""
    import json

    manifests = [json.loads((Path(d) / "manifest.json").read_text()) for d in run_dirs]
    comp = compare_runs(paper, manifests, rows)
    return markdown(comp), write_comparison(out, comp)
