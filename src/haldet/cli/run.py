"""`haldet run`: flags -> a typed `RunOptions` -> a `RunConfig`, the run flow (`haldet.flow`), then the run's summary
and reports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from haldet.cli.options import (
    AllowFailures,
    DataFile,
    JudgeBackendHelp,
    MetricsOption,
    SplitOption,
    Threads,
    check_metrics,
    local_data,
)
from haldet.cli.outcome import run_problems
from haldet.config import RunConfig, digest, split_names
from haldet.config_files import compose_config
from haldet.defaults import skipped_detectors
from haldet.errors import HaldetError
from haldet.presets import load_preset
from haldet.util.console import console, exit_on_failures, out_console, progress_bars
from haldet.util.threads import configure_threads

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
    metrics: list[str] | None = None
    calibration: str | None = None
    preset: str | None = None
    min_per_class: int | None = None
    responses: Path | None = None
    level: list[str] | None = None


def run(
    dataset: Annotated[list[str] | None, typer.Option("--dataset", "-d", help="Dataset(s): repeat or comma list. "
                                                      "See `haldet datasets list`.")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Model(s): alias (smollm2-135m, "
                                                    "gemma3-270m), hub id, local dir or .gguf file; openai:NAME, "
                                                    "api:PROVIDER/MODEL, vllm:MODEL (docs/backends.md).")] = None,
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
                                                       "e.g. http://127.0.0.1:8080/v1 (or a compatible server for "
                                                       "`api:PROVIDER/MODEL` models).")] = None,
    executor: Annotated[str, typer.Option(help="serial | ray: run cells and item shards as Ray tasks "
                                          "(optional extra `ray`; docs/backends.md).")] = "serial",
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address (default: $RAY_ADDRESS, else a "
                                                    "local cluster).")] = None,
    allow_failures: Annotated[bool, AllowFailures] = False,
    min_per_class: Annotated[int | None, typer.Option(help="Labelled test items each class needs for a cell to be "
                                                      "ranked (default 5; 0 = no minimum); a thinner cell is "
                                                      "marked and fails the run unless --allow-failures.")] = None,
    threads: Annotated[int | None, Threads] = None,
    suite: Annotated[str | None, typer.Option(help="Run a hosted benchmark with its datasets, protocol, detectors, "
                                              "levels and tables (see `haldet suites list`); flags override.")]
    = None,
    metrics: Annotated[list[str] | None, MetricsOption] = None,
    calibration: Annotated[str | None, typer.Option(help="none | platt | isotonic: map each detector's score to "
                                                    "P(hallucination), fitted on validation; adds ECE and Brier "
                                                    "rows (evaluation.calibration).")] = None,
    preset: Annotated[str | None, typer.Option(help="A paper's settings (openhaldet, halluentity, verigray, "
                                               "triviaplus, hallulens; `haldet presets show NAME`) under --config "
                                               "and the flags; docs/replication.md.")] = None,
    responses: Annotated[Path | None, typer.Option(help="Score your own responses: a JSONL/CSV/Parquet file with "
                                                   "prompt (or question) and response (or answer), optional "
                                                   "context, label, units, id (docs/api.md).")] = None,
    level: Annotated[list[str] | None, typer.Option(help="Levels to evaluate (repeat or comma list: claim, "
                                                    "response, sentence, ...): the suite that scores the dataset's "
                                                    "units, e.g. longform for factscore_bio (docs/longform.md).")]
    = None,
) -> None:
    """Run the benchmark: generate, annotate, split, score, evaluate; print a table, write the run directory.

    With no options: the embedded SmolLM2-135M on packaged HaluEval-QA (200 items), fully offline.
    Run it again and everything is read from the cache. With --suite NAME: that suite (docs/suites.md).
    With --responses FILE: your own responses, read teacher-forced by the model (docs/api.md).
    """
    if threads is not None:  # the global `haldet --threads N` works too; given here, it is this run's

        configure_threads(threads)
    run_benchmark(RunOptions(
        dataset=dataset, model=model, detector=detector, limit=limit, out=out, config_file=config_file,
        data_dir=data_dir, data_file=data_file, split=split, on_bad_row=on_bad_row, batch_size=batch_size,
        max_new_tokens=max_new_tokens, decode_rows=decode_rows, device=device, judge=judge, judge_model=judge_model,
        judge_base_url=judge_base_url, judge_backend=judge_backend, update=update, as_json=as_json,
        model_base_url=model_base_url, executor=executor, ray_address=ray_address, allow_failures=allow_failures,
        suite=suite, metrics=metrics, calibration=calibration, preset=preset, min_per_class=min_per_class,
        responses=responses, level=level,
    ))


def run_benchmark(opts: RunOptions) -> None:
    """The body of `haldet run`: config, run flow, per-cell summary, results (table, JSON or the suite's), reports,
    and the exit status from what failed."""
    from haldet.flow import run as flow_run  # lazy: sklearn, scipy
    from haldet.flow.results import cell_entry  # lazy: sklearn, scipy
    from haldet.report.rundata import skipped_lines  # lazy: h5py, pyarrow
    from haldet.report.terminal import judge_lines, print_results  # lazy: sklearn, scipy

    config = run_config(opts)
    target = opts.out or default_out(config)
    preset_line = ""
    if config.preset:
        preset_line = (f"preset {config.preset} (hash {load_preset(config.preset).hash}): the paper's settings under "
                       "--config and the flags; docs/replication.md lists what still differs")
        console.print(preset_line, highlight=False)
    if opts.out is None:  # say where it goes before the work starts: a config of its own has a folder of its own
        console.print(f"run directory: {target} (no --out: named after the datasets, models and changed settings)",
                      highlight=False, soft_wrap=True)  # a path is never broken across lines
    try:
        with progress_bars() as make:
            if opts.responses is not None:  # your data checked against what the directory scored, then run
                from haldet.commands.responses import run_responses  # lazy: sklearn, scipy

                rows, cells = run_responses(config, target, update=opts.update or opts.out is None,
                                            given=f"--responses {opts.responses}", api=False, progress=make,
                                            executor=opts.executor, ray_address=opts.ray_address)
            else:
                rows, cells = flow_run.run(config, target, update=opts.update or opts.out is None, progress=make,
                                           executor=opts.executor, ray_address=opts.ray_address)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: say what is kept and how to go on
        console.print(interrupted_message(target), highlight=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED) from None
    print_cells(cells)
    failed = [(c.dataset, c.model, c.error) for c in cells if c.error]
    if config.suite:
        from haldet.suites.base import get_suite  # lazy: sklearn, scipy
        from haldet.suites.report import cells_without_values, show_suite_results  # lazy: sklearn, scipy

        show_suite_results(config.suite, rows, out_console, as_json=opts.as_json)
        if opts.responses is not None and not opts.as_json:
            print_scored(cells, target)
        _write_run_reports(target, suite=(config.suite, rows, preset_line))
        console.print(f"run directory: {target}", highlight=False, soft_wrap=True)
        exit_on_failures(run_problems(cells) + cells_without_values(get_suite(config.suite), rows),
                         opts.allow_failures)
        return
    if opts.as_json:
        out_console.print_json(json.dumps(rows))
    else:
        title = "haldet results (test split" + (f", preset {config.preset})" if config.preset else ")")
        llm = config.judge.model if config.judge.kind in ("llm", "cascade") else None
        print_results(out_console, rows, title=title, failed=failed,
                      notes=[*judge_lines([cell_entry(c) for c in cells], llm),
                             *skipped_lines(skipped_detectors(config.detectors))],
                      metrics=check_metrics(split_names(opts.metrics), rows))
    _write_run_reports(target, metrics=split_names(opts.metrics))
    console.print(f"run directory: {target}", highlight=False, soft_wrap=True)
    exit_on_failures(run_problems(cells), opts.allow_failures)


INTERRUPTED = 130  # the shell's status for a command stopped by SIGINT


def interrupted_message(target: Path) -> str:
    """What an interrupted run kept: the records each cell's stage logs hold (every batch appended before the
    interrupt; the batch in progress is lost), and that the same command resumes from them."""
    kept = []
    for cell in sorted({p.parent for p in target.glob("*/*/*.jsonl")}):
        logs = sorted(cell.glob("*.jsonl")) + sorted((cell / "scores").glob("*.jsonl"))
        counts = [f"{log.stem} {_count_lines(log)}" for log in logs]
        kept.append(f"{cell.parent.name} | {cell.name}: {', '.join(counts)}")
    what = ("kept in " + str(target) + " (records per stage log): " + "; ".join(kept)) if kept else \
        f"nothing was stored yet in {target}"
    return f"interrupted: {what}. Run the same command again to resume from what is stored."


def _count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def run_config(opts: RunOptions) -> RunConfig:
    """The run's config, layer over layer: the suite's settings (from --suite, the preset's or the config file's
    `suite`), the preset (--preset, or the config file's `preset`), the config file, the flags; --split applies to
    every dataset of the run. --responses FILE: the `responses` suite on it."""
    if opts.responses is not None:
        config = _responses_config(opts)
        return _with_levels(config, "responses", split_names(opts.level)) if opts.level else config
    overrides = dict(
        datasets=split_names(opts.dataset), models=split_names(opts.model), detectors=split_names(opts.detector),
        limit=opts.limit, data_dir=local_data(opts.data_dir, opts.data_file, split_names(opts.dataset) or None),
        on_bad_row=opts.on_bad_row, device=opts.device, decode_rows=opts.decode_rows,
        generation__batch_size=opts.batch_size, generation__max_new_tokens=opts.max_new_tokens,
        judge__kind=opts.judge, judge__model=opts.judge_model, judge__base_url=opts.judge_base_url,
        judge__backend=opts.judge_backend, endpoint__base_url=opts.model_base_url, preset=opts.preset,
        evaluation__calibration=opts.calibration, evaluation__min_per_class=opts.min_per_class,
    )
    from haldet.flow.layers import load_config  # lazy: sklearn, scipy

    suite, levels = opts.suite, split_names(opts.level)
    if levels:  # --level: the suite that scores those units (named, the config file's, or the datasets')
        from haldet.suites.levels import suite_with_levels  # lazy: sklearn, scipy

        if suite is None:
            probe = load_config(opts.config_file, None, suite=None, **overrides)
            suite = probe.suite
        suite, _ = suite_with_levels(suite, split_names(opts.dataset), levels)
    config = load_config(opts.config_file, None, suite=suite, **overrides)
    if levels and suite is not None:  # the flag wins over the suite's and the config file's levels
        config = _with_levels(config, suite, levels)
    if opts.data_file is not None and len(config.datasets) > 1:
        config = _one_dataset_for_the_file(config, opts)
    for name in config.datasets if opts.split else []:
        config.dataset_params.setdefault(name, {})["split"] = opts.split
    return config


def _with_levels(config: RunConfig, suite: str, levels: list[str]) -> RunConfig:
    """`config` with `--level` as the suite's levels (over the suite's own and the config file's)."""
    merged = {**config.suite_params, suite: {**config.suite_params.get(suite, {}), "levels": levels}}
    return config.model_copy(update={"suite_params": merged})


def _one_dataset_for_the_file(config: RunConfig, opts: RunOptions) -> RunConfig:
    """--data-file is one dataset's data: under a suite (no --dataset), the suite's own dataset, its first (the
    companions read other release files); any other run with several datasets is refused before any work."""
    from haldet.suites.base import get_suite  # lazy: sklearn, scipy

    suite_datasets = list(get_suite(config.suite).datasets) if config.suite else []
    if not split_names(opts.dataset) and suite_datasets and config.datasets == suite_datasets:
        console.print(f"--data-file {opts.data_file} is read as {suite_datasets[0]}, the suite's own dataset (its "
                      f"companions {', '.join(suite_datasets[1:])} need their own files: --dataset NAME --data-file "
                      "FILE, or --data-dir)", highlight=False, soft_wrap=True)
        return config.model_copy(update={"datasets": suite_datasets[:1]})
    raise HaldetError(f"--data-file holds one dataset's data, but the run has {len(config.datasets)} datasets "
                      f"({', '.join(config.datasets)})", where="--data-file",
                      hint="name exactly one --dataset, or use --data-dir DIR with DIR/<dataset>/ folders")


def _responses_config(opts: RunOptions) -> RunConfig:
    """`haldet run --responses FILE`: the file checked (columns, rows, labels for trained detectors) before any
    work."""
    from haldet.commands.responses import DATASET, SUITE, responses_config  # lazy: sklearn, scipy

    assert opts.responses is not None
    clash = [flag for flag, given in (("--data-dir", opts.data_dir), ("--data-file", opts.data_file),
                                      ("--split", opts.split)) if given is not None]
    clash += [] if split_names(opts.dataset) in ([], [DATASET]) else ["--dataset"]
    clash += [] if opts.suite in (None, SUITE) else ["--suite"]
    if clash:
        raise HaldetError(f"--responses FILE is the run's data: {', '.join(clash)} cannot be given with it",
                          where="command-line options", hint="drop " + " and ".join(clash))
    path = opts.responses.resolve()
    if not path.is_file():
        raise HaldetError("no such responses file", where=str(opts.responses),
                          hint="check the path given to --responses")
    config = run_config(RunOptions(**{**vars(opts), "responses": None, "suite": SUITE, "dataset": [DATASET],
                                      "data_file": path}))
    return responses_config(path, config)


def print_scored(cells: Iterable[Any], target: Path) -> None:
    """What a responses run scored, per detector and level (the scores themselves: `haldet.load_run`)."""
    from haldet.stages.tokens import BEYOND_CONTEXT  # lazy: h5py

    for cell in cells:
        for d in cell.detectors:
            if not d.error:
                n_nan = int(sum(1 for v in d.scores.values if v != v)) if d.scores is not None else 0
                n_long = sum(1 for r in d.scores.reasons if r.startswith(BEYOND_CONTEXT)) if n_nan else 0
                console.print(f"{d.name} ({d.level} level): {d.n_scored} responses scored"
                              + (f", {n_nan} without a score (NaN, reasons in the score log)" if n_nan else "")
                              + (f"; {n_long} of them exceed the model's context (not read)" if n_long else ""),
                              highlight=False)
    console.print(f"scores: `haldet.load_run({str(target)!r}).table()` in Python (docs/api.md), or "
                  f"{target}/<dataset>/<model>/scores/*.jsonl", highlight=False)


def default_out(config: RunConfig) -> Path:
    """Where a run without --out goes: `runs/<datasets>__<models>` for the default settings of those datasets and
    models (a rerun reuses its cache); any other config gets a folder of its own named by what it changes, e.g.
    `runs/halueval_qa__smollm2-135m__detectors-perplexity_limit-20`, so a quick look never overwrites the default
    run's results (and running it again finds its own cache)."""
    name = "_".join(config.datasets)[:60] + "__" + "_".join(m.replace("/", "-") for m in config.models)[:60]
    suffix = config_suffix(config)
    return Path("runs") / (f"{name}__{suffix}" if suffix else name)


_SAFE = re.compile(r"[^A-Za-z0-9._+-]")


def config_suffix(config: RunConfig, width: int = 80) -> str:
    """The settings that differ from the defaults for the config's datasets, models and suite, as readable
    `setting-value` parts; a short hash of those settings is appended when the parts cannot say them exactly
    (paths, per-detector parameters, long lists), so two different configs never share a folder."""
    from haldet.flow.layers import layer_base  # lazy: sklearn, scipy

    baseline = compose_config(None, base=layer_base(config.suite, config.preset), datasets=config.datasets,
                           models=config.models)
    changed = config.diff(baseline)
    if not changed:
        return ""
    mine = config.canonical()
    values = {key: _dotted(mine, key) for key in changed}
    parts, exact = [], True
    for key, value in values.items():
        items = value if isinstance(value, list) else [value]
        if value is None or any(isinstance(v, (dict, list)) for v in items):
            exact = False
            parts.append(key)
            continue
        text = "+".join(str(v) for v in items)
        safe = _SAFE.sub("-", text.rstrip("/").rpartition("/")[2])
        exact &= safe == text
        parts.append(f"{key}-{safe}")
    readable = "_".join(parts)
    if len(readable) > width:
        readable, exact = readable[:width].rstrip("_-"), False
    return readable if exact else f"{readable}-{digest(values, 8)}"


def _dotted(data: Any, key: str) -> Any:
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


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
        if cut := cell.data.get("no_answer"):
            console.print(f"[yellow]{cell.dataset} | {cell.model}: {cut['n']}/{cut['of']} output(s) have no answer "
                          f"({cut['reason']}); they are labelled invalid and never scored; raise "
                          f"{cut['setting']}[/yellow]", highlight=False)
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


def _write_run_reports(target: Path, suite: tuple[str, list[dict[str, Any]], str] | None = None,
                       metrics: list[str] | None = None) -> None:
    """The run's reports into its directory, by the writers `haldet.score_responses` uses too
    (`haldet.report.build`): a suite's tables (`suite`: its name, result rows and the line above them), then
    tables.md, tables.tex, report.html; a report failure never loses results. `metrics`: extra metric tables."""
    from haldet.report.build import listing, run_reports, suite_file  # lazy: sklearn, matplotlib

    written: dict[str, Path] = {}
    try:
        written = run_reports(target, metrics or ())
    except HaldetError as exc:
        console.print(f"[yellow]reports not written:[/yellow] {exc.message}", highlight=False)
    except Exception as exc:  # a report bug must not turn a finished run into a failure; results are on disk
        console.print(f"[red]reports not written ({type(exc).__name__}: {exc});[/red] the results are saved; "
                      f"retry with `haldet report {target}`", highlight=False)
    if suite is not None:
        written["suite_tables.md"] = suite_file(target, *suite)
    if paths := listing(written):
        console.print("reports: " + ", ".join(paths), highlight=False, soft_wrap=True)
