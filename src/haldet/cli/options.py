"""Flags that several commands share, defined once so their help text stays the same everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from haldet.config import DEFAULT_LLM_BACKEND, LLM_BACKEND_HELP
from haldet.errors import HaldetError

# One flag for every "finished, but with failures" outcome (cells without a result, items a stage could not
# process): the run keeps what it did and exits 1 unless the user accepts the failures.
AllowFailures = typer.Option("--allow-failures", help="Exit 0 even when some cells or items failed (no usable "
                                                      "label, endpoint failures); what was done is kept either way.")

# global (`haldet --threads N run`) and on `run` itself (`haldet run --threads N`), same meaning
Threads = typer.Option(help="CPU threads for torch (default: the cores this process may use, from its affinity and "
                            "cgroup quota; docs/speed.md).")

# where the judge's backend flag is optional (`run`, `annotate`): its help names the one default
JudgeBackendHelp = f"LLM judge backend: {LLM_BACKEND_HELP} Default: {DEFAULT_LLM_BACKEND}."

DataFile = typer.Option(help="One data file of the (single) dataset, in its hub schema or an original release "
                             "format (see `haldet datasets show NAME --formats`).")
SplitOption = typer.Option(help="The split to evaluate (default: the dataset's own order, docs/datasets.md).")

MetricsOption = typer.Option("--metrics", help="Further metric columns beside AUROC (repeat or comma list), e.g. "
                             "prr,prr_50,ece,brier; also a Table 2 layout each in tables.md (docs/reports.md).")

RunDirArg = Annotated[Path, typer.Argument(help="A run directory written by `haldet run`.")]


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


def check_metrics(names: list[str], rows: list[dict[str, object]]) -> list[str]:
    """The `--metrics` names, each of which some result row holds; else one message naming those it holds."""
    present = list(dict.fromkeys(str(r.get("metric")) for r in rows))
    unknown = [n for n in names if n not in present]
    if unknown and rows:
        raise HaldetError(f"no result row holds metric(s) {', '.join(unknown)}", where="--metrics",
                          hint=f"the rows hold: {', '.join(present)} (ece and brier need evaluation.calibration)")
    return names
