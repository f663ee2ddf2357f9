"""The `haldet` command line (typer + rich).

User errors (`HaldetError`) and file-system errors (`OSError`: read-only or full disk, permission denied) are
printed as one message and exit with status 2, without a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from haldet.config import RunConfig, load_config, split_names
from haldet.errors import HaldetError, storage_error
from haldet.suites.hallulens.cli import app as hallulens_app
from haldet.version import __version__

app = typer.Typer(
    help="Benchmark hallucination detectors for LLMs: generate answers, label them, score them with "
         "detectors, and report AUROC/AUPR/FPR@95 with bootstrap CIs.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)
datasets_app = typer.Typer(help="List and inspect dataset adapters.")
detectors_app = typer.Typer(help="List registered detectors.")
suites_app = typer.Typer(help="List the hosted benchmarks (suites): HalluEntity, VeriGray, TRIVIA+, HalluLens.")
app.add_typer(datasets_app, name="datasets")
app.add_typer(detectors_app, name="detectors")
app.add_typer(suites_app, name="suites")
app.add_typer(hallulens_app, name="hallulens")

console = Console(stderr=True, emoji=False)  # model specs like openai:m: must not turn into emoji
out_console = Console(emoji=False)


def _version(value: bool) -> None:
    if value:
        print(f"haldet {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    threads: Annotated[int | None, typer.Option(help="CPU threads for torch (default: the cores this process may "
                                                     "use, from its affinity and cgroup quota).")] = None,
) -> None:
    """haldet: one fair protocol for hallucination detectors."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    signal.signal(signal.SIGTERM, _terminated)
    from haldet.threads import configure_threads

    configure_threads(threads)


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM (kill, a job scheduler) stops like Ctrl-C: the manifest records the run as failed ("interrupted")
    and what was written is kept."""
    raise KeyboardInterrupt


@contextmanager
def progress_bars() -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """A factory of progress displays for the stages, (description, total) -> advance(n): bars on a terminal,
    periodic log lines when stderr is redirected (haldet.progress)."""
    from haldet.progress import progress_factory

    with progress_factory(console) as make:
        yield make


# One flag for every "finished, but with failures" outcome (cells without a result, items a stage could not
# process): the run keeps what it did and exits 1 unless the user accepts the failures.
AllowFailures = typer.Option("--allow-failures", help="Exit 0 even when some cells or items failed (no usable "
                                                      "label, endpoint failures); what was done is kept either way.")


DataFile = typer.Option(help="One data file of the (single) dataset, in its hub schema or an original release "
                             "format (see `haldet datasets show NAME --formats`).")
SplitOption = typer.Option(help="The split to evaluate (default: the dataset's own order, docs/datasets.md).")


def local_data(data_dir: Path | None, data_file: Path | None, datasets: list[str] | None) -> str | None:
    """--data-dir or --data-file (a file is the data of one dataset) as the config's `data_dir`."""
    if data_file is None:
        return str(data_dir) if data_dir else None
    if data_dir is not None:
        raise HaldetError("--data-dir and --data-file both given", hint="pass one of them")
    if not data_file.is_file():
        raise HaldetError("no such data file", where=str(data_file), hint="check the path given to --data-file")
    if datasets is not None and len(datasets) != 1:
        raise HaldetError("--data-file holds one dataset's data", where="--dataset",
                          hint="name exactly one --dataset, or use --data-dir DIR with DIR/<dataset>/ folders")
    return str(data_file)


def default_out(config: RunConfig) -> Path:
    """Same datasets and models -> same folder, so a rerun reuses its cache; other changes update it."""
    name = "_".join(config.datasets)[:60] + "__" + "_".join(m.replace("/", "-") for m in config.models)[:60]
    return Path("runs") / name


@app.command()
def run(
    dataset: Annotated[list[str] | None, typer.Option("--dataset", "-d", help="Dataset(s): repeat or comma list. "
                                                      "See `haldet datasets list`.")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Model(s): alias (smollm2-135m, "
                                                    "gemma3-270m), hub id, local dir or .gguf file.")] = None,
    detector: Annotated[list[str] | None, typer.Option("--detector", help="Detector(s): repeat or comma list. "
                                                       "See `haldet detectors list`.")] = None,
    limit: Annotated[int | None, typer.Option(help="Items per dataset (after a seeded shuffle).")] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory (default: runs/<datasets>__<models>).")] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="YAML config file; flags override it.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Read datasets from local files: DIR/<dataset>/ (any file "
                                                       "names; hub schema or the original release formats).")] = None,
    data_file: Annotated[Path | None, DataFile] = None,
    split: Annotated[str | None, SplitOption] = None,
    on_bad_row: Annotated[str | None, typer.Option(help="skip|fail on a dataset row missing a field.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Generation batch size.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Max generated tokens per answer.")] = None,
    decode_rows: Annotated[int | None, typer.Option(help="Rows the local decoding loop runs together (default 96; "
                                                    "docs/speed.md).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda, cuda:1 ...")] = None,
    judge: Annotated[str | None, typer.Option(help="Labelling: rule | exec | llm | cascade (default cascade; "
                                              "see `haldet annotate --help`).")] = None,
    judge_model: Annotated[str | None, typer.Option(help="LLM judge model (enables it in the cascade).")] = None,
    judge_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of the LLM judge.")] = None,
    judge_backend: Annotated[str | None, typer.Option(help="LLM judge backend: openai | hf.")] = None,
    update: Annotated[bool, typer.Option(help="Allow a changed config in an existing --out "
                                              "(still-valid cached evidence is reused).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result rows as JSON.")] = False,
    model_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of `openai:NAME` models, "
                                                       "e.g. http://127.0.0.1:8080/v1.")] = None,
    executor: Annotated[str, typer.Option(help="serial | ray: run cells and item shards as Ray tasks "
                                          "(optional extra `ray`; docs/backends.md).")] = "serial",
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address (default: $RAY_ADDRESS, else a "
                                                    "local cluster).")] = None,
    allow_failures: Annotated[bool, AllowFailures] = False,
    suite: Annotated[str | None, typer.Option(help="Run a hosted benchmark with its datasets, protocol, detectors, "
                                              "levels and tables (see `haldet suites list`); flags override.")]
    = None,
) -> None:
    """Run the benchmark: generate, annotate, split, score, evaluate; print a table, write the run directory.

    With no options: the embedded SmolLM2-135M on packaged HaluEval-QA (200 items), fully offline.
    Run it again and everything is read from the cache. With --suite NAME: that suite (docs/suites.md).
    """
    from haldet.flow import run as pipeline
    from haldet.outcome import run_problems
    from haldet.report.terminal import results_table

    overrides = dict(
        datasets=split_names(dataset), models=split_names(model), detectors=split_names(detector),
        limit=limit, data_dir=local_data(data_dir, data_file, split_names(dataset) or None), on_bad_row=on_bad_row,
        device=device, decode_rows=decode_rows,
        generation__batch_size=batch_size, generation__max_new_tokens=max_new_tokens,
        judge__kind=judge, judge__model=judge_model, judge__base_url=judge_base_url, judge__backend=judge_backend,
        endpoint__base_url=model_base_url,
    )
    config = load_config(config_file, base=_suite_base(suite), **overrides)
    if config.suite and not suite:  # a suite named in the config file: its settings lie under the file's
        config = load_config(config_file, base=_suite_base(config.suite), **overrides)
    for name in config.datasets if split else []:
        config.dataset_params.setdefault(name, {})["split"] = split
    target = out or default_out(config)
    with progress_bars() as make:
        rows, cells = pipeline.run(config, target, update=update or out is None, progress=make,
                                   executor=executor, ray_address=ray_address)
    for cell in cells:
        if cell.error:
            console.print(f"[red]cell {cell.dataset} | {cell.model} failed:[/red] {cell.error}")
        else:
            console.print(f"{cell.dataset} | {cell.model}: labels {cell.label_counts}, split {cell.split_sizes}")
        if (cell.data.get("generation") or {}).get("warning"):
            console.print(f"[yellow]{cell.dataset} | {cell.model}: {cell.data['generation']['warning']}[/yellow]",
                          highlight=False)
        if not cell.error:
            by_judge = cell.annotation.get("by_judge", {})
            if by_judge:
                console.print("  labels by judge: " + "; ".join(f"{j} {c}" for j, c in by_judge.items()),
                              highlight=False)
            if cell.data.get("units"):
                console.print("  units: " + "; ".join(f"{lv} {c}" for lv, c in cell.data["units"].items()),
                              highlight=False)
            if cell.annotation.get("failed"):
                console.print(f"  [red]{cell.annotation['failed']} item(s) could not be judged[/red] "
                              "(annotate.failed.jsonl; rerun to retry them)")
        if cell.data.get("n_skipped"):
            console.print(f"[yellow]{cell.dataset}: {cell.data['n_skipped']} bad rows skipped[/yellow] "
                          f"(first: {'; '.join(cell.data.get('skipped') or [])[:300]})", highlight=False)
        for d in cell.detectors:
            if d.error:
                console.print(f"[red]detector {d.name} failed on {cell.dataset}:[/red] {d.error}")
    failed = [(c.dataset, c.model, c.error) for c in cells if c.error]
    if config.suite:
        from haldet.suites.report import print_suite_results

        print_suite_results(config.suite, rows, target, out_console, as_json=as_json)
        _write_run_reports(target)
        console.print(f"run directory: {target}")
        exit_on_failures(run_problems(cells), allow_failures)
        return
    if as_json:
        out_console.print_json(json.dumps(rows))
    else:
        out_console.print(results_table(rows, failed=failed))
    _write_run_reports(target)
    console.print(f"run directory: {target}")
    exit_on_failures(run_problems(cells), allow_failures)


def exit_on_failures(failures: list[str], allow: bool) -> None:
    """The closing summary of what failed (`haldet.outcome`); exit status 1 unless `--allow-failures`."""
    from haldet.outcome import ALLOW_HINT, EXIT_FAILURES

    if not failures:
        return
    color = "yellow" if allow else "red"
    console.print(f"[{color}]finished with {len(failures)} failure(s):[/{color}]")
    for line in failures:
        console.print(f"  - {line}", highlight=False, markup=False, emoji=False)
    if not allow:
        console.print(f"  -> exit status 1: {ALLOW_HINT}", highlight=False)
        raise typer.Exit(EXIT_FAILURES)


def _suite_base(name: str | None) -> dict[str, Any] | None:
    """A suite's run settings (datasets, detectors, levels...), under the config file and the flags."""
    if not name:
        return None
    from haldet.suites.base import get_suite

    return get_suite(name).config_base()


def _write_run_reports(target: Path) -> None:
    """tables.md, tables.tex and report.html into the run directory; a report failure never loses results."""
    from haldet.report.build import write_reports
    from haldet.report.rundata import load_run
    from haldet.store import RunStore

    try:
        with RunStore(target).lock():  # another run queued on this directory must not change it mid-report
            written = write_reports(target, [load_run(target)], write_results=False)
    except HaldetError as exc:
        console.print(f"[yellow]reports not written:[/yellow] {exc.message}", highlight=False)
        return
    except Exception as exc:  # a report bug must not turn a finished run into a failure; results are on disk
        console.print(f"[red]reports not written ({type(exc).__name__}: {exc});[/red] the results are saved; "
                      f"retry with `haldet report {target}`", highlight=False)
        return
    console.print("reports: " + ", ".join(str(p) for p in written.values()), highlight=False)


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories written by `haldet run`.")],
    out: Annotated[Path | None, typer.Option(help="Folder for the merged results and reports "
                                                 "(default: the run directory when one run is given).")] = None,
    n_boot: Annotated[int, typer.Option(help="Resamples of the paired bootstrap comparisons in the HTML.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="Print the merged result rows as JSON.")] = False,
) -> None:
    """Rebuild the reports from stored runs without recomputing anything: results.json/csv/parquet (merged over
    the runs; a cell present in several runs keeps the later run's rows), tables.md and tables.tex (Tables 2, 9
    and 11 layouts), and report.html (self-contained: summary, scenario x detector heatmap, AUROC vs Cost@100
    on a log axis, ROC curves per dataset, paired comparisons, run metadata). See docs/reports.md.
    """
    from haldet.report.build import report_runs
    from haldet.report.terminal import results_table

    if out is None:
        if len(run_dirs) != 1:
            raise HaldetError("several runs need an --out DIR for the merged report", where="--out",
                              hint="e.g. haldet report runs/a runs/b --out reports/ab")
        out = run_dirs[0]
    written, rows = report_runs(run_dirs, out, n_boot=n_boot)
    if as_json:
        out_console.print_json(json.dumps(rows, default=str))
    else:
        out_console.print(results_table(rows))
    console.print("written: " + ", ".join(str(p) for p in written.values()), highlight=False)


@app.command()
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
    from rich.table import Table

    from haldet.evaluation.compare import paired_bootstrap
    from haldet.report.rundata import load_run

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
        print(json.dumps(results, indent=2))
        return
    table = Table(title=f"paired bootstrap: {detector_a} - {detector_b} (AUROC, {n_boot} resamples)")
    for col in ("dataset", "model", "N", "pos", f"AUROC {detector_a}", f"AUROC {detector_b}", "diff [95% CI]", "p",
                "note"):
        table.add_column(col)

    def fmt(v: float | None) -> str:
        return "—" if v is None else f"{v:.3f}"

    for r in results:
        ci = f" [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]" if r["ci_low"] is not None else ""
        table.add_row(r["dataset"], r["model"], str(r["n"]), str(r["n_pos"]), fmt(r["auroc_a"]), fmt(r["auroc_b"]),
                      fmt(r["diff"]) + ci, fmt(r["p_value"]), r["note"])
    out_console.print(table)


JudgeKind = typer.Option(help="rule | exec | llm | cascade (default: the run's; cascade = rule and execution "
                                "judges where they apply, the LLM judge for the rest when --judge-model is set).")


@app.command()
def annotate(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `haldet run`.")],
    judge: Annotated[str | None, JudgeKind] = None,
    judge_model: Annotated[str | None, typer.Option(help="LLM judge model: endpoint model name (e.g. gpt-4o-mini) "
                                                   "or, with --judge-backend hf, an hf id/alias/path.")] = None,
    judge_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint, e.g. "
                                                       "http://localhost:8000/v1 (key from $OPENAI_API_KEY).")] = None,
    judge_backend: Annotated[str | None, typer.Option(help="openai (any compatible endpoint) | hf (local).")] = None,
    judge_concurrency: Annotated[int | None, typer.Option(help="LLM requests in flight.")] = None,
    judge_retries: Annotated[int | None, typer.Option(help="Retries per item (429/5xx/timeout/malformed).")] = None,
    judge_timeout: Annotated[float | None, typer.Option(help="Seconds per LLM request.")] = None,
    judge_max_tokens: Annotated[int | None, typer.Option(help="Judge reply token budget.")] = None,
    judge_template_dir: Annotated[Path | None, typer.Option(help="Folder overriding judge_*.txt / "
                                                           "judge_examples.json.")] = None,
    compare_with: Annotated[str | None, typer.Option(help="Also label with this judge kind and report Cohen's "
                                                     "kappa and the confusion table.")] = None,
    dataset: Annotated[list[str] | None, typer.Option("--dataset", "-d", help="Only these datasets of the run.")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the per-cell reports as JSON.")] = False,
    allow_failures: Annotated[bool, AllowFailures] = False,
) -> None:
    """Label (or relabel) the answers of an existing run: correct / hallucination / abstention / invalid.

    Resumable: labels are appended as they come; items that failed after all retries are listed in
    annotate.failed.jsonl and a rerun retries only those. The label distribution per dataset and judge goes to
    the manifest. See docs/judges.md.
    """
    from haldet.commands.annotate import annotate_run, render_reports

    overrides = {"kind": judge, "model": judge_model, "base_url": judge_base_url, "backend": judge_backend,
                 "concurrency": judge_concurrency, "retries": judge_retries, "timeout": judge_timeout,
                 "max_tokens": judge_max_tokens, "template_dir": str(judge_template_dir) if judge_template_dir
                 else None}
    with progress_bars() as make:
        reports = annotate_run(run_dir, overrides, compare_with=compare_with, datasets=split_names(dataset),
                               progress=make)
    from haldet.outcome import annotate_problems

    if as_json:
        print(json.dumps(reports, indent=2, default=str))
    else:
        for renderable in render_reports(reports):
            out_console.print(renderable)
    exit_on_failures(annotate_problems(reports), allow_failures)


RunDirArg = Annotated[Path, typer.Argument(help="A run directory written by `haldet run`.")]


def _stage_command(run_dir: Path, stage: str, overrides: dict[str, dict[str, Any]], as_json: bool) -> None:
    from haldet.commands.stages import run_stage

    with progress_bars() as make:
        summaries = run_stage(run_dir, stage, overrides=overrides, progress=make)
    if as_json:
        print(json.dumps(summaries, indent=2))
        return
    for s in summaries:
        console.print(f"{stage} {s['dataset']} | {s['model']}: {s['computed']} of {s['items']} items computed "
                      f"({s['seconds']} s); the rest were cached", highlight=False)
        if s["not_computed"]:
            console.print(f"[yellow]not computed, no detector of this run reads them: {', '.join(s['not_computed'])}"
                          f"[/yellow] (add the detectors that do: `haldet run --out {run_dir} --update --detector "
                          f"...`)", highlight=False)


@app.command()
def sample(
    run_dir: RunDirArg,
    k: Annotated[int | None, typer.Option("--k", help="Samples per item (default 5).")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature (default 1.0).")] = None,
    top_p: Annotated[float | None, typer.Option(help="Nucleus mass (default 0.9).")] = None,
    seed: Annotated[int | None, typer.Option(help="Base seed (each item and sample derives its own).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Max tokens per sample.")] = None,
    hidden_layer: Annotated[int | None, typer.Option(help="Hidden-state index pooled per sample (-1 = last).")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print per-cell summaries as JSON.")] = False,
) -> None:
    """K stochastic answers per item (seeded, batched), with sequence log-likelihoods and (when the run's detectors
    include EigenScore) a pooled hidden state per sample. Resumable; changed settings are saved to the run's
    manifest and only this stage recomputes.
    See docs/stages.md."""
    _stage_command(run_dir, "sample", {"sample": {"k": k, "temperature": temperature, "top_p": top_p, "seed": seed,
                                                  "max_new_tokens": max_new_tokens, "hidden_layer": hidden_layer}},
                   as_json)


@app.command()
def auxiliary(
    run_dir: RunDirArg,
    max_new_tokens: Annotated[int | None, typer.Option(help="Max tokens of each auxiliary reply.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print per-cell summaries as JSON.")] = False,
) -> None:
    """Verbalized confidence and self-evaluation P(True) per item (greedy; appendix E.1). Resumable."""
    _stage_command(run_dir, "auxiliary", {"auxiliary": {"max_new_tokens": max_new_tokens}}, as_json)


@app.command()
def features(
    run_dir: RunDirArg,
    layers: Annotated[str | None, typer.Option(help="'all' or a comma list of hidden-state indices (0 = "
                                                    "embeddings, -1 = last layer).")] = None,
    pooling: Annotated[list[str] | None, typer.Option(help="mean and/or last (repeat or comma list).")] = None,
    group: Annotated[list[str] | None, typer.Option(help="Feature groups: hidden, sep, ccs, prism, icr.")] = None,
    dtype: Annotated[str | None, typer.Option(help="float16 (default) or float32 arrays.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print per-cell summaries as JSON.")] = False,
) -> None:
    """One teacher-forced pass over prompt + the exact generated ids: log-probs, entropies, and the feature groups
    the run's detectors read (pooled hidden states, SEP, ICR, CCS/PRISM statements as branches of the same pass).
    Resumable. See docs/stages.md."""
    parsed_layers: Any = None
    if layers is not None:
        try:
            parsed_layers = "all" if layers.strip() == "all" else [int(x) for x in split_names([layers])]
        except ValueError:
            raise HaldetError(f"--layers must be 'all' or integers, got {layers!r}", where="--layers") from None
    _stage_command(run_dir, "features", {"features": {"layers": parsed_layers, "pooling": split_names(pooling) or None,
                                                      "groups": split_names(group) or None, "dtype": dtype}}, as_json)


@app.command()
def inspect(
    run_dir: RunDirArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Evidence in a run: per signal how many items have it, array shapes and dtypes, and consistency checks
    (missing arrays, duplicate records, K per item, teacher-forced vs generation log-probs, window overflows).
    Exits 1 when a check fails."""
    from rich.table import Table

    from haldet.commands.stages import inspect_run

    report = inspect_run(run_dir)
    failed = any(cell["problems"] for cell in report)
    if as_json:
        print(json.dumps(report, indent=2, default=str))
        if failed:
            raise typer.Exit(1)
        return
    for cell in report:
        table = Table(title=f"{cell['dataset']} | {cell['model']}: {cell['items']} items")
        table.add_column("signal")
        table.add_column("items", justify="right")
        for name, n in cell["signals"].items():
            table.add_row(name, str(n))
        out_console.print(table)
        arrays = Table(title="arrays")
        arrays.add_column("stage/array")
        arrays.add_column("shape dtype: items")
        for name, shapes in cell["arrays"].items():
            arrays.add_row(name, ", ".join(f"{k}: {v}" for k, v in shapes.items()))
        out_console.print(arrays)
        for stage, checks in cell["checks"].items():
            out_console.print(f"{stage}: " + ", ".join(f"{k}={v}" for k, v in checks.items()), highlight=False)
        if cell["problems"]:
            console.print("[red]problems:[/red] " + "; ".join(cell["problems"]), highlight=False)
        else:
            out_console.print("consistency checks passed", highlight=False)
    if failed:
        raise typer.Exit(1)


@datasets_app.command("list")
def datasets_list(
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Also count local files here as offline data.")] = None,
) -> None:
    """Every registered dataset adapter: scenario, task type, source (hub id/config), license, and whether its
    data is available offline (packaged, or found under --data-dir)."""
    from rich.table import Table

    from haldet.datasets.base import DATASETS

    infos = [{**cls.info(data_dir), "origin": DATASETS.origin(name)} for name, cls in DATASETS]
    if as_json:
        print(json.dumps(infos, indent=2, default=str))
        return
    table = Table(title=f"datasets ({len(infos)})")
    cols = ("name", "scenario", "task_type", "source", "license", "offline", *_origin_column(infos))
    for col in cols:
        table.add_column(col)
    for info in infos:
        table.add_row(*(str(info[c]) for c in cols))
    out_console.print(table)


def _dataset_options(values: list[str] | None) -> dict[str, Any]:
    """`--option key=value` pairs (value parsed as YAML: lists, numbers, booleans)."""
    import yaml

    out: dict[str, Any] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HaldetError(f"bad dataset option {item!r}", where="--option", hint="use KEY=VALUE, e.g. "
                              "--option languages=eng_Latn,fra_Latn")
        out[key.strip()] = yaml.safe_load(value)
    return out


@datasets_app.command("show")
def datasets_show(
    name: Annotated[str, typer.Argument(help="Dataset name (see `haldet datasets list`).")],
    limit: Annotated[int, typer.Option(help="How many items.")] = 3,
    data_dir: Annotated[Path | None, typer.Option(help="Local files: DIR/<name>/ (any file names).")] = None,
    data_file: Annotated[Path | None, DataFile] = None,
    split: Annotated[str | None, SplitOption] = None,
    formats: Annotated[bool, typer.Option("--formats", help="List the accepted local files and exit.")] = False,
    on_bad_row: Annotated[str, typer.Option(help="skip|fail on a row missing a required field.")] = "fail",
    seed: Annotated[int, typer.Option(help="Shuffle seed (the run's data_seed).")] = 42,
    option: Annotated[list[str] | None, typer.Option("--option", help="Adapter option KEY=VALUE (repeatable), "
                                                     "e.g. languages=eng_Latn,deu_Latn for belebele.")] = None,
    prompt: Annotated[bool, typer.Option("--prompt", help="Also print each item's user prompt.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print unified instances as JSON.")] = False,
) -> None:
    """Load a dataset through its adapter and show unified instances (what the run evaluates, same order)."""
    from haldet.datasets.base import get_adapter
    from haldet.prompts import PromptBuilder

    options = {**_dataset_options(option), **({"split": split} if split else {})}
    adapter = get_adapter(name, local_data(data_dir, data_file, None), options, where="dataset name")
    if formats:
        for fmt in adapter.formats():
            out_console.print(f"{fmt.name}: {fmt.describe}", highlight=False)
        return
    instances, report = adapter.load(limit=limit, seed=seed, on_bad_row=on_bad_row)
    console.print(f"{name}: {len(instances)} items; {report.summary()}", highlight=False)
    for reason in report.skipped:
        console.print(f"  skipped {reason}", highlight=False)
    dumped = [inst.model_dump(mode="json") for inst in instances]
    if as_json:
        print(json.dumps(dumped, indent=2, ensure_ascii=False))
        return
    builder = PromptBuilder() if prompt else None
    for inst, data in zip(instances, dumped, strict=True):
        out_console.print_json(json.dumps({k: v for k, v in data.items() if k != "source"}, ensure_ascii=False))
        if builder is not None:
            out_console.print(builder.user_message(inst), markup=False, highlight=False)


@detectors_app.command("list")
def detectors_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every registered detector: family, required signals, whether it trains, named variants."""
    from rich.table import Table

    from haldet.detectors.base import DETECTORS

    infos: list[dict[str, Any]] = [
        {"name": name, "family": str(cls.family()), "requires": sorted(s.value for s in cls.requires),
         "trains": cls.trains, "variants": sorted(cls.variants), "defaults": cls.defaults,
         "version": cls.version, "origin": DETECTORS.origin(name)}
        for name, cls in DETECTORS
    ]
    if as_json:
        print(json.dumps(infos, indent=2, default=str))
        return
    table = Table(title="detectors")
    cols = ("name", "family", "requires", "trains", "variants", *_origin_column(infos))
    for col in cols:
        table.add_column(col, no_wrap=col == "name")  # a name must stay copyable, never cut with an ellipsis
    for info in infos:
        table.add_row(*(", ".join(v) if isinstance(v := info[c], list) else str(v) for c in cols))
    out_console.print(table)


def _origin_column(infos: list[dict[str, Any]]) -> tuple[str, ...]:
    """The `origin` column, shown only when a plugin package contributed something."""
    return ("origin",) if any(i["origin"] != "built-in" for i in infos) else ()


@suites_app.command("list")
def suites_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every hosted benchmark: its datasets, protocol (provided responses or generation), levels, detectors."""
    from rich.table import Table

    from haldet.suites.base import SUITES

    infos = [cls.info() for _, cls in SUITES]
    if as_json:
        print(json.dumps(infos, indent=2))
        return
    table = Table(title=f"suites ({len(infos)}); run one with `haldet run --suite NAME`")
    for col in ("name", "title", "datasets", "protocol", "levels", "detectors"):
        table.add_column(col, no_wrap=col == "name")
    for info in infos:
        table.add_row(info["name"], info["title"], ", ".join(info["datasets"]), info["protocol"],
                      ", ".join(info["levels"]), ", ".join(info["detectors"]))
    out_console.print(table)


def entry() -> None:
    """Console-script entry point: user errors become one message and exit code 2."""
    try:
        app()
    except HaldetError as exc:
        console.print(f"[bold red]error:[/bold red] {exc.message}", highlight=False)
        sys.exit(2)
    except OSError as exc:  # read-only or full disk, no permission: one message naming the path, no traceback
        console.print(f"[bold red]error:[/bold red] {storage_error(exc).message}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        console.print("interrupted; everything written so far is kept and a rerun resumes from it")
        sys.exit(130)
