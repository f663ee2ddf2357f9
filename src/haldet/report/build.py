"""Write every report of one or more runs, from what the runs stored (nothing is recomputed).

Files (in the run directory after `haldet run`, or in `--out DIR` for `haldet report RUN... --out DIR`):
    results.json / results.csv / results.parquet   the merged tidy table (only written for --out)
    tables.md                                      Tables 2, 9 and 11 and the per-backbone summary (Markdown)
    tables.tex                                     Tables 2, 9 and 11 (LaTeX, booktabs)
    report.html                                    self-contained HTML with plots (inline SVG, no script)
    figures/NAME.pdf, figures/NAME.png             every plot of report.html, for a paper (listed in the run's
                                                   manifest under "figures"; `--out DIR` has no manifest: the
                                                   files are in the listing `write_reports` returns)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from haldet.errors import HaldetError
from haldet.figures.render import FigureSet
from haldet.papers.compare import compare_runs
from haldet.papers.table2 import PAPER as TABLE2_PAPER
from haldet.papers.table2 import table2
from haldet.report.deployment import ensemble_pairs, pairs_markdown
from haldet.report.html import build_html
from haldet.report.learned import learned_markdown
from haldet.report.paper_html import paper_section
from haldet.report.rundata import RunData, load_run, merge_runs, preset_lines, skipped_in_runs, skipped_lines
from haldet.report.tables import all_latex, all_markdown
from haldet.store import RunStore, atomic_path, atomic_write_text
from haldet.suites.report import write_suite_tables

REPORT_FILES = ("tables.md", "tables.tex", "report.html")
FIGURES = "figures"
FIGURE_SUFFIXES = (".pdf", ".png")


def save_figures(out: Path, figures: FigureSet) -> dict[str, Path]:
    """Every rendered file into `out/figures/` (files of figures this report no longer draws are removed); a run
    directory's manifest lists the figures under "figures" (name, title, files relative to the run)."""
    folder = out / FIGURES
    written: dict[str, Path] = {}
    for name, data in figures.files():
        with atomic_path(folder / name) as tmp:
            tmp.write_bytes(data)
        written[f"{FIGURES}/{name}"] = folder / name
    for old in sorted(folder.iterdir()) if folder.is_dir() else []:
        if old.suffix in FIGURE_SUFFIXES and f"{FIGURES}/{old.name}" not in written:
            old.unlink()
    store = RunStore(out)
    manifest = store.read_manifest()
    if manifest is not None:
        manifest["figures"] = [{"name": r.name, "title": r.title, "files": [f"{FIGURES}/{f}" for f in r.file_names()]}
                               for r in figures.rendered]
        store.write_manifest(manifest)
    return written


def listing(written: dict[str, Path]) -> list[str]:
    """The written paths for a terminal line: the figure files counted per format, not named one by one."""
    figs = [p for n, p in written.items() if n.startswith(f"{FIGURES}/")]
    lines = [str(p) for n, p in written.items() if not n.startswith(f"{FIGURES}/")]
    if figs:
        counts = ", ".join(f"{sum(p.suffix == s for p in figs)} {s[1:].upper()}" for s in FIGURE_SUFFIXES)
        lines.append(f"{figs[0].parent}/ ({counts})")
    return lines


def write_run_files(target: Path, *, suite: str | None = None, rows: list[dict[str, Any]] | None = None,
                    header: str = "", metrics: Sequence[str] = ()) -> dict[str, Path]:
    """The reports a finished run writes into its own directory, the same whichever way it ran (`haldet run`,
    `haldet run --responses`, `haldet.score_responses`): a suite's `suite_tables.md` (`suite_file`), then
    tables.md, tables.tex and report.html (`run_reports`)."""
    tables = {"suite_tables.md": suite_file(target, suite, rows or [], header)} if suite else {}
    return {**run_reports(target, metrics), **tables}


def suite_file(target: Path, suite: str, rows: list[dict[str, Any]], header: str = "") -> Path:
    """`suite_tables.md`: the suite's tables of `rows`, `header` a line above them, the prompts the run learned
    (its manifest's cells) below them."""
    cells = list((RunStore(target).read_manifest() or {}).get("cells") or [])
    return write_suite_tables(suite, rows, target, header=header, footer=learned_markdown(cells))


def run_reports(target: Path, metrics: Sequence[str] = ()) -> dict[str, Path]:
    """tables.md, tables.tex and report.html of the run in `target`, under its lock: another run queued on this
    directory must not change it mid-report."""
    with RunStore(target).lock():
        return write_reports(target, [load_run(target)], write_results=False, metrics=metrics)


def paper_html(paper: str, runs: Sequence[RunData], rows: Sequence[dict[str, Any]]) -> str:
    """report.html's section putting the paper's numbers beside ours (`--paper`; OpenHalDet adds its Table 2)."""
    comp = compare_runs(paper, [r.manifest for r in runs], rows)
    return paper_section(comp, table2(rows) if paper == TABLE2_PAPER else None)


def write_reports(out: Path, runs: Sequence[RunData], *, title: str | None = None, n_boot: int = 1000,
                  write_results: bool = True, metrics: Sequence[str] = (), paper: str | None = None
                  ) -> dict[str, Path]:
    """Merged results (optional), Markdown, LaTeX and HTML reports and the figures in `out`; returns name -> path
    (figure files as "figures/NAME.pdf"). `metrics`: more metrics (beyond AUROC) that get their own Table 2 layout
    in tables.md and tables.tex; `paper`: report.html also puts that paper's numbers beside ours."""
    if not runs:
        raise HaldetError("no run to report on", hint="pass one or more run directories")
    rows: list[dict[str, Any]] = merge_runs(runs) if len(runs) > 1 else [dict(r) for r in runs[0].rows]
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    if write_results:
        RunStore(out).write_results(rows)
        written.update({n: out / n for n in ("results.json", "results.csv", "results.parquet")})
    header = preset_lines(runs)
    skipped = skipped_lines(skipped_in_runs(runs, rows))
    markdown = all_markdown(rows, metrics=metrics, header=header) if rows else \
        "".join(f"{line}  \n" for line in header) + "No result rows.\n"
    pairs = pairs_markdown(ensemble_pairs(runs, rows, n_boot), n_boot) if rows else ""
    markdown += "\n" + pairs if pairs else ""
    learned = learned_markdown([c for r in runs for c in r.cells()])
    markdown += "\n" + learned if learned else ""
    if skipped:
        markdown += "\n## Detectors not run\n\n" + "".join(f"- {line}\n" for line in skipped)
    atomic_write_text(out / "tables.md", markdown)
    atomic_write_text(out / "tables.tex", all_latex(rows, metrics=metrics) if rows else "% no result rows\n")
    name = title or ("haldet report: " + ", ".join(r.name for r in runs))
    figures = FigureSet()
    section = paper_html(paper, runs, rows) if paper else ""
    atomic_write_text(out / "report.html", build_html(runs, rows, title=name, n_boot=n_boot, figures=figures,
                                                      paper=section))
    written.update({n: out / n for n in REPORT_FILES})
    written.update(save_figures(out, figures))
    return written


def report_runs(run_dirs: Sequence[Path | str], out: Path, *, n_boot: int = 1000, metrics: Sequence[str] = (),
                paper: str | None = None) -> tuple[dict[str, Path], list[dict[str, Any]]]:
    """`haldet report`: load the runs, write the merged results and every report into `out`. Holds `out`'s run
    lock while it reads and writes, so a run still writing there is never overwritten with what it had before."""
    runs = [load_run(d) for d in run_dirs]  # fail on a bad run dir before the lock creates `out`
    with RunStore(out).lock():
        runs = [load_run(d) for d in run_dirs]
        written = write_reports(out, runs, n_boot=n_boot, write_results=True, metrics=metrics, paper=paper)
    rows = merge_runs(runs) if len(runs) > 1 else runs[0].rows
    return written, rows
