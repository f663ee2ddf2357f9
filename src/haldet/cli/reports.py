"""`haldet report` and `haldet compare`: read stored runs, recompute nothing but the reports and comparisons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from haldet.cli.options import MetricsOption, check_metrics
from haldet.config import split_names
from haldet.errors import HaldetError
from haldet.papers import paper_rows
from haldet.util.console import console, out_console, print_json, print_table


def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories written by `haldet run`.")],
    out: Annotated[Path | None, typer.Option(help="Folder for the merged results and reports "
                                                 "(default: the run directory when one run is given).")] = None,
    n_boot: Annotated[int, typer.Option(help="Resamples of the paired bootstrap comparisons in the HTML.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the merged result rows as JSON.")] = False,
    metrics: Annotated[list[str] | None, MetricsOption] = None,
    paper: Annotated[str | None, typer.Option(help="Also put a paper's reported numbers beside ours "
                                                   "(paper_NAME.md/.csv; for openhaldet also its Table 2 in the "
                                                   "paper's oriented convention, paper_openhaldet_table2.md/.csv; "
                                                   "docs/replication.md): openhaldet, "
                                                   "halluentity, verigray, triviaplus, hallulens.")] = None,
) -> None:
    """Rebuild the reports from stored runs without recomputing anything: results.json/csv/parquet (merged over
    the runs; a cell present in several runs keeps the later run's rows), tables.md and tables.tex (Tables 2, 9
    and 11 layouts), and report.html (self-contained: summary, scenario x detector heatmap, AUROC vs Cost@100
    on a log axis, ROC and precision-recall curves per dataset, paired comparisons, run metadata), and every
    plot of it as PDF and PNG in figures/ for a paper. See docs/reports.md.
    """
    from haldet.report.build import listing, report_runs  # lazy: sklearn, matplotlib
    from haldet.report.terminal import print_results  # lazy: sklearn, scipy

    if out is None:
        if len(run_dirs) != 1:
            raise HaldetError("several runs need an --out DIR for the merged report", where="--out",
                              hint="e.g. haldet report runs/a runs/b --out reports/ab")
        out = run_dirs[0]
    wanted = split_names(metrics)
    if wanted:  # a misspelt metric fails before anything is written
        from haldet.report.rundata import load_run, merge_runs  # lazy: h5py, pyarrow

        check_metrics(wanted, merge_runs([load_run(d) for d in run_dirs]))
    if paper:
        paper_rows(paper)  # an unknown paper fails before anything is written
    written, rows = report_runs(run_dirs, out, n_boot=n_boot, metrics=wanted, paper=paper)
    text = ""
    if paper:
        from haldet.papers import compare, table2  # lazy: sklearn, scipy

        text, files = compare.report_paper(paper, run_dirs, rows, out)
        written.update(files)
        if paper == "openhaldet":  # Table 2 in the paper's oriented convention: its own labelled files
            table2_text, files = table2.write_table2(out, rows)
            text += "\n" + table2_text
            written.update(files)
    if as_json:
        out_console.print_json(json.dumps(rows, default=str))
    else:
        print_results(out_console, rows, metrics=wanted)
        if text:
            out_console.print(text, markup=False, highlight=False, soft_wrap=True)
    console.print("written: " + ", ".join(listing(written)), highlight=False)


def compare(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `haldet run`.")],
    detector_a: Annotated[str, typer.Argument(help="First detector.")],
    detector_b: Annotated[str, typer.Argument(help="Second detector.")],
    dataset: Annotated[list[str] | None, typer.Option("--dataset", "-d", help="Only these datasets.")] = None,
    n_boot: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 42,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparisons as JSON.")] = False,
) -> None:
    """Paired bootstrap of AUROC(a) - AUROC(b) on the same test items, per (dataset, model) cell of a run:
    stratified resamples applied to both detectors at once, 95% CI and a two-sided bootstrap p."""
    from haldet.evaluation.compare import paired_bootstrap  # lazy: sklearn, scipy
    from haldet.report.rundata import load_run  # lazy: h5py, pyarrow

    data = load_run(run_dir)
    wanted = set(split_names(dataset))
    results = []
    for cell in data.cells():
        ds, model = str(cell.get("dataset")), str(cell.get("model"))
        if (wanted and ds not in wanted) or cell.get("error"):
            continue
        scores = data.cell_scores(ds, model, [detector_a, detector_b])
        if scores is None:
            continue
        missing = [d for d in (detector_a, detector_b) if d not in scores.scores]
        if missing:
            raise HaldetError(f"no cached test scores for {', '.join(missing)} on {ds} | {model}",
                              where=str(run_dir), hint="run these detectors first (haldet run --detector ...)")
        cmp = paired_bootstrap(scores.labels, scores.scores[detector_a], scores.scores[detector_b], a=detector_a,
                               b=detector_b, n_boot=n_boot, seed=seed)
        results.append({"dataset": ds, "model": model, **cmp.as_dict()})
    if not results:
        raise HaldetError("no cell of this run has test scores to compare", where=str(run_dir),
                          hint="check the dataset names (--dataset) and that the run finished")
    if as_json:
        print_json(results)
        return

    def fmt(v: float | None) -> str:
        return "—" if v is None else f"{v:.3f}"

    columns = ("dataset", "model", "N", "pos", f"AUROC {detector_a}", f"AUROC {detector_b}", "diff [95% CI]", "p",
               "note")
    rows = [(r["dataset"], r["model"], str(r["n"]), str(r["n_pos"]), fmt(r["auroc_a"]), fmt(r["auroc_b"]),
             fmt(r["diff"]) + (f" [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]" if r["ci_low"] is not None else ""),
             fmt(r["p_value"]), r["note"]) for r in results]
    print_table(f"paired bootstrap: {detector_a} - {detector_b} (AUROC, {n_boot} resamples)", columns, rows)
