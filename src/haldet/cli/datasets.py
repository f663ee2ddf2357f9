"""`haldet datasets list|show`: the registered dataset adapters, and a dataset loaded as the run would see it (or,
with `--where`, the file and line that define its adapter)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from haldet.cli.options import DataFile, SplitOption, local_data
from haldet.errors import HaldetError
from haldet.util.console import console, origin_column, out_console, print_json, print_table

app = typer.Typer(help="List and inspect dataset adapters.")


@app.command("list")
def datasets_list(
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Also count local files here as offline data.")] = None,
) -> None:
    """Every registered dataset adapter: scenario, task type, source (hub id/config), license, and whether its
    data is available offline (packaged, or found under --data-dir)."""
    from haldet.datasets.base import DATASETS  # lazy: start-up

    infos = [{**cls.info(data_dir), "origin": DATASETS.origin(name)} for name, cls in DATASETS]
    if as_json:
        print_json(infos, default=str)
        return
    cols = ("name", "scenario", "task_type", "source", "license", "offline", *origin_column(infos))
    print_table(f"datasets ({len(infos)})", cols, ([str(info[c]) for c in cols] for info in infos),
                no_wrap={"name"})


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


@app.command("show")
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
    where: Annotated[bool, typer.Option("--where", help="Show where the adapter is defined (file:line of its class) "
                                        "and what `datasets list` shows of it, and load nothing.")] = False,
) -> None:
    """Load a dataset through its adapter and show unified instances (what the run evaluates, same order); the
    first line (on stderr) names the file and line that define the adapter."""
    from haldet.datasets.base import DATASETS, get_adapter  # lazy: start-up
    from haldet.text.prompts import PromptBuilder  # lazy: jinja2

    found = DATASETS.where(name) if name in DATASETS else None
    defined = str(found) if found is not None else "(no Python source)"
    if where:
        cls = DATASETS.get(name, where="dataset name")
        info = {**cls.info(local_data(data_dir, data_file, None)), "origin": DATASETS.origin(name)}
        if as_json:
            print_json({**info, "file": None if found is None else str(found.file),
                        "line": None if found is None else found.line}, default=str)
            return
        rows = ([key, str(value)] for key, value in {"defined": defined, **info}.items())
        print_table(f"dataset {name}", ("field", "value"), rows, no_wrap={"value"})
        return
    options = {**_dataset_options(option), **({"split": split} if split else {})}
    adapter = get_adapter(name, local_data(data_dir, data_file, None), options, where="dataset name")
    if formats:
        for fmt in adapter.formats():
            out_console.print(f"{fmt.name}: {fmt.describe}", highlight=False)
        return
    instances, report = adapter.load(limit=limit, seed=seed, on_bad_row=on_bad_row)
    console.print(f"{name} ({defined}): {len(instances)} items; {report.summary()}", highlight=False)
    for reason in report.skipped:
        console.print(f"  skipped {reason}", highlight=False)
    dumped = [inst.model_dump(mode="json") for inst in instances]
    if as_json:
        print_json(dumped, ensure_ascii=False)
        return
    builder = PromptBuilder() if prompt else None
    for inst, data in zip(instances, dumped, strict=True):
        out_console.print_json(json.dumps({k: v for k, v in data.items() if k != "source"}, ensure_ascii=False))
        if builder is not None:
            out_console.print(builder.user_message(inst), markup=False, highlight=False)
