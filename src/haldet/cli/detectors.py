"""`haldet detectors list`: every registered detector (built-in and from plugin packages)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from haldet.util.console import origin_column, print_json, print_table

app = typer.Typer(help="List registered detectors.")


def needs(cls: Any) -> list[str]:
    """What a detector needs beside the run's model: its auxiliary models (kind and default) and verdict prompt."""
    models = [f"{kind} ({param}={cls.defaults.get(param, '')})" if cls.defaults.get(param) else kind
              for param, kind in getattr(cls, "auxiliary", {}).items()]
    ask = getattr(cls, "ask", None)
    if isinstance(ask, property):  # built from the parameters (the LLM judges): the default instance's
        ask = cls().ask
    return models + ([f"verdict prompt {ask.name}"] if ask is not None and hasattr(ask, "name") else [])


@app.command("list")
def detectors_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every registered detector: family, required signals, the levels it scores, the models it needs beside the
    run's (auxiliary models, verdict prompts), whether it trains, named variants."""
    from haldet.detectors.base import DETECTORS

    infos: list[dict[str, Any]] = [
        {"name": name, "family": str(cls.family()), "requires": sorted(s.value for s in cls.requires),
         "levels": list(getattr(cls, "levels", ("response",))), "needs": needs(cls),
         "trains": cls.trains, "variants": sorted(cls.variants), "defaults": cls.defaults,
         "version": cls.version, "origin": DETECTORS.origin(name)}
        for name, cls in DETECTORS
    ]
    if as_json:
        print_json(infos, default=str)
        return
    cols = ("name", "family", "requires", "levels", "needs", "trains", "variants", *origin_column(infos))
    rows = ([", ".join(v) if isinstance(v := info[c], list) else str(v) for c in cols] for info in infos)
    print_table("detectors", cols, rows, no_wrap={"name"})  # a name must stay copyable, never cut with an ellipsis
