"""`haldet suites list`: the hosted benchmarks and how each runs."""

from __future__ import annotations

from typing import Annotated

import typer

from haldet.cli.console import print_json, print_table

app = typer.Typer(help="List the hosted benchmarks (suites): HalluEntity, VeriGray, TRIVIA+, HalluLens.")


@app.command("list")
def suites_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every hosted benchmark: its datasets, protocol (provided responses or generation), levels, default detectors
    and the paper's detectors that need a model of their own (`--json` adds the table titles)."""
    from haldet.suites.base import SUITES

    infos = [cls.info() for _, cls in SUITES]
    if as_json:
        print_json(infos)
        return
    rows = ([info["name"], info["title"], ", ".join(info["datasets"]), info["protocol"], ", ".join(info["levels"]),
             ", ".join(info["detectors"]), ", ".join(info["optional_detectors"])] for info in infos)
    print_table(f"suites ({len(infos)}); run one with `haldet run --suite NAME`",
                ("name", "title", "datasets", "protocol", "levels", "detectors", "also (--detector; own model)"),
                rows, no_wrap={"name"})
