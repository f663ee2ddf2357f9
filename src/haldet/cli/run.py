"""`haldet run`: flags -> a typed `RunOptions` -> a `RunConfig`, the run flow (`haldet.flow`), then the run's summary
and reports."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from haldet.cli.console import console, exit_on_failures, out_console, progress_bars
from haldet.cli.options import AllowFailures, DataFile, JudgeBackendHelp, SplitOption, Threads, local_data
from haldet.config import RunConfig, load_config, skipped_detectors, split_names
from haldet.errors import HaldetError

# what `default_out` gives, in words, for `--out`'s help (keep the two together; `default_out` is below)
DEFAULT_OUT_HELP = ("runs/<datasets>__<models> under the current directory, e.g. runs/halueval_qa__smollm2-135m for "
                    "a bare `haldet run`")


@dataclass(frozen=True)
class RunOptions:
    """Every `haldet run` flag as given (None = not given), so helpers take one typed object, not 25 arguments."""

    dataset: list[str] | None = None
    model: list[str] | None = None
    detector: list[str] | None = None
    limit: int | None = None
    out: Path | None = None
    config_file: Path | None = None
    data_dir: Path | None = None
    data_file: Path | None = None
    split: str | None = None
    on_bad_row: str | None = None
    batch_size: int | None = None
    max_new_tokens: int | None = None
    decode_rows: int | None = None
    device: str | None = None
    judge: str | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    judge_backend: str | None = None
    update: bool = False
    as_json: bool = False
    model_base_url: str | None = None
    executor: str = "serial"
    ray_address: str | None = None
    allow_failures: bool = False
    suite: str | None = None


def run(
    dataset: Annotated[list[str] | None, typer.Option("--dataset", "-d", help="Dataset(s): repeat or comma list. "
                                                      "See `haldet datasets list`.")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Model(s): alias (smollm2-135m, "
                                                    "gemma3-270m), hub id, local dir or .gguf file.")] = None,
    detector: Annotated[list[str] | None, typer.Option("--detector", help="Detector(s): repeat or comma list. "
                                                       "See `haldet detectors list`.")] = None,
    limit: Annotated[int | None, typer.Option(help="Items per dataset (after a seeded shuffle).")] = None,
    out: Annotated[Path | None, typer.Option(help=f"Run directory (default: {DEFAULT_OUT_HELP}).")] = None,
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
    judge_backend: Annotated[str | None, typer.Option(help=JudgeBackendHelp)] = None,
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
    threads: Annotated[int | None, Threads] = None,
    suite: Annotated[str | None, typer.Option(help="Run a hosted benchmark with its datasets, protocol, detectors, "
                                              "levels and tables (see `haldet suites list`); flags override.")]
    = None,
) -> None:
    """Run the benchmark: generate, annotate, split, score, evaluate; print a table, write the run directory.

    With no options: the embedded SmolLM2-135M on packaged HaluEval-QA (200 items), fully offline.
    Run it again and everything is read from the cache. With --suite NAME: that suite (docs/suites.md).
    """
    if threads is not None:  # the global `haldet --threads N` works too; given here, it is this run's
        from haldet.util.threads import configure_threads

        configure_threads(threads)
    run_benchmark(RunOptions(
        dataset=dataset, model=model, detector=detector, limit=limit, out=out, config_file=config_file,
        data_dir=data_dir, data_file=data_file, split=split, on_bad_row=on_bad_row, batch_size=batch_size,
        max_new_tokens=max_new_tokens, decode_rows=decode_rows, device=device, judge=judge, judge_model=judge_model,
        judge_base_url=judge_base_url, judge_backend=judge_backend, update=update, as_json=as_json,
        model_base_url=model_base_url, executor=executor, ray_address=ray_address, allow_failures=allow_failures,
        suite=suite,
    ))


def run_benchmark(opts: RunOptions) -> None:
    """The body of `haldet run`: config, run flow, per-cell summary, results (table, JSON or the suite's), reports,
    and the exit status from what failed."""
    from haldet.cli.outcome import run_problems
    from haldet.flow import run as pipeline
    from haldet.report.rundata import skipped_lines
    from haldet.report.terminal import print_results

    config = run_config(opts)
    target = opts.out or default_out(config)
    with progress_bars() as make:
        rows, cells = pipeline.run(config, target, update=opts.update or opts.out is None, progress=make,
                                   executor=opts.executor, ray_address=opts.ray_address)
    print_cells(cells)
    failed = [(c.dataset, c.model, c.error) for c in cells if c.error]
    if config.suite:
        from haldet.suites.report import print_suite_results

        print_suite_results(config.suite, rows, target, out_console, as_json=opts.as_json)
        _write_run_reports(target)
        console.print(f"run directory: {target}")
        exit_on_failures(run_problems(cells), opts.allow_failures)
        return
    if opts.as_json:
        out_console.print_json(json.dumps(rows))
    else:
        print_results(out_console, rows, failed=failed, notes=skipped_lines(skipped_detectors(config.detectors)))
    _write_run_reports(target)
    console.print(f"run directory: {target}")
    exit_on_failures(run_problems(cells), opts.allow_failures)


def run_config(opts: RunOptions) -> RunConfig:
    """The run's config: the suite's settings (from --suite, or the config file's `suite`) under the config file,
    under the flags; --split applies to every dataset of the run."""
    overrides = dict(
        datasets=split_names(opts.dataset), models=split_names(opts.model), detectors=split_names(opts.detector),
        limit=opts.limit, data_dir=local_data(opts.data_dir, opts.data_file, split_names(opts.dataset) or None),
        on_bad_row=opts.on_bad_row, device=opts.device, decode_rows=opts.decode_rows,
        generation__batch_size=opts.batch_size, generation__max_new_tokens=opts.max_new_tokens,
        judge__kind=opts.judge, judge__model=opts.judge_model, judge__base_url=opts.judge_base_url,
        judge__backend=opts.judge_backend, endpoint__base_url=opts.model_base_url,
    )
    config = load_config(opts.config_file, base=_suite_base(opts.suite), **overrides)
    if config.suite and not opts.suite:  # a suite named in the config file: its settings lie under the file's
        config = load_config(opts.config_file, base=_suite_base(config.suite), **overrides)
    for name in config.datasets if opts.split else []:
        config.dataset_params.setdefault(name, {})["split"] = opts.split
    return config


def default_out(config: RunConfig) -> Path:
    """Same datasets and models -> same folder, so a rerun reuses its cache; other changes update it."""
    name = "_".join(config.datasets)[:60] + "__" + "_".join(m.replace("/", "-") for m in config.models)[:60]
    return Path("runs") / name


def print_cells(cells: Iterable[Any]) -> None:
    """Per cell (`flow.cell.CellResult`): its labels and split, or why it failed; warnings, labels by judge, units,
    unjudged items, skipped rows and failed detectors."""
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
