"""The stage commands (`haldet sample`, `auxiliary`, `features`) and `haldet inspect`: one evidence stage, or a
look at the evidence, on an existing run (`haldet.commands.stages`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from haldet.cli.options import RunDirArg
from haldet.config import split_names
from haldet.errors import HaldetError
from haldet.util.console import console, out_console, print_json, progress_bars


def _stage_command(run_dir: Path, stage: str, overrides: dict[str, dict[str, Any]], as_json: bool) -> None:
    """Run one stage with the given setting overrides, then one summary line per cell (or JSON)."""
    from haldet.commands.stages import run_stage  # lazy: sklearn, scipy

    with progress_bars() as make:
        summaries = run_stage(run_dir, stage, overrides=overrides, progress=make)
    if as_json:
        print_json(summaries)
        return
    for s in summaries:
        console.print(f"{stage} {s['dataset']} | {s['model']}: {s['computed']} of {s['items']} items computed "
                      f"({s['seconds']} s); the rest were cached", highlight=False)
        if s["not_computed"]:
            console.print(f"[yellow]not computed, no detector of this run reads them: {', '.join(s['not_computed'])}"
                          f"[/yellow] (add the detectors that do: `haldet run --out {run_dir} --update --detector "
                          f"...`)", highlight=False)


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


def auxiliary(
    run_dir: RunDirArg,
    max_new_tokens: Annotated[int | None, typer.Option(
        help="Max tokens of each auxiliary reply (unset: 24, 4096 when the model thinks).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print per-cell summaries as JSON.")] = False,
) -> None:
    """Verbalized confidence and self-evaluation P(True) per item (greedy; appendix E.1). Resumable."""
    _stage_command(run_dir, "auxiliary", {"auxiliary": {"max_new_tokens": max_new_tokens}}, as_json)


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


def inspect(
    run_dir: RunDirArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Evidence in a run: per signal how many items have it, array shapes and dtypes, and consistency checks
    (missing arrays, duplicate records, K per item, teacher-forced vs generation log-probs, window overflows).
    Exits 1 when a check fails."""
    from rich.table import Table

    from haldet.commands.stages import inspect_run  # lazy: sklearn, scipy

    report = inspect_run(run_dir)
    failed = any(cell["problems"] for cell in report)
    if as_json:
        print_json(report, default=str)
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


