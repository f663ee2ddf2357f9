"""`haldet detectors list`: every registered detector (built-in and from plugin packages)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from haldet.cli.console import origin_column, print_json, print_table

app = typer.Typer(help="List registered detectors.")


@app.command("list")
def detectors_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every registered detector: family, required signals, whether it trains, named variants."""
    from haldet.detectors.base import DETECTORS

    infos: list[dict[str, Any]] = [
        {"name": name, "family": str(cls.family()), "requires": sorted(s.value for s in cls.requires),
         "trains": cls.trains, "variants": sorted(cls.variants), "defaults": cls.defaults,
         "version": cls.version, "origin": DETECTORS.origin(name)}
        for name, cls in DETECTORS
    ]
    if as_json:
        print_json(infos, default=str)
        return
    cols = ("name", "family", "requires", "trains", "variants", *origin_column(infos))
    rows = ([", ".join(v) if isinstance(v := info[c], list) else str(v) for c in cols] for info in infos)
    print_table("detectors", cols, rows, no_wrap={"name"})  # a name must stay copyable, never cut with an ellipsis
