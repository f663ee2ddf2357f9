"""`haldet suites list|show`: the hosted benchmarks, how each runs, its detectors and the tables it writes."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from haldet.cli.detectors import needs
from haldet.util.console import out_console, print_json, print_table

app = typer.Typer(help="List the hosted benchmarks (suites): HalluEntity, VeriGray, TRIVIA+, HalluLens; show one.")


@app.command("list")
def suites_list(as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False) -> None:
    """Every hosted benchmark: its datasets, protocol (provided responses or generation), levels, default detectors
    and the paper's detectors that run only when named (`--json` adds the table titles; `suites show NAME`)."""
    from haldet.suites.base import SUITES  # lazy: sklearn, scipy

    infos = [cls.info() for _, cls in SUITES]
    if as_json:
        print_json(infos, default=str)
        return
    rows = ([info["name"], info["title"], ", ".join(info["datasets"]), info["protocol"], ", ".join(info["levels"]),
             ", ".join(info["detectors"]), ", ".join(info["optional_detectors"])] for info in infos)
    print_table(f"suites ({len(infos)}); run one with `haldet run --suite NAME`, details: `haldet suites show NAME`",
                ("name", "title", "datasets", "protocol", "levels", "detectors", "also (--detector)"),
                rows, no_wrap={"name"})


def _detector_rows(info: dict[str, Any]) -> list[dict[str, Any]]:
    """Each detector of a suite, default or named with --detector: family, levels, what it needs beside the run's
    model, whether it trains, and whether it scores one of the suite's levels."""
    from haldet.detectors.base import DETECTORS  # lazy: start-up

    rows = []
    for role, names in (("default", info["detectors"]), ("--detector", info["optional_detectors"])):
        for name in names:
            cls = DETECTORS.get(name)
            levels = list(getattr(cls, "levels", ("response",)))
            rows.append({"name": name, "runs": role, "family": str(cls.family()), "levels": levels,
                         "suite_levels": [lv for lv in info["levels"] if lv in levels],
                         "needs": needs(cls), "trains": cls.trains})
    return rows


@app.command("show")
def suites_show(
    name: Annotated[str, typer.Argument(help="Suite name (see `haldet suites list`).")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """One hosted benchmark: its protocol and options, every detector it runs by default or when named (the levels
    each scores and the models it needs), and every table it writes (suite_tables.md and report.html of a run, or
    the files of the suite's own command)."""
    from haldet.suites.base import get_suite  # lazy: sklearn, scipy

    info = type(get_suite(name, where="suite name")).info()
    info["detector_details"] = _detector_rows(info)
    if as_json:
        print_json(info, default=str)
        return
    say = out_console.print
    say(f"{info['name']}: {info['title']}  ({info['paper']})", highlight=False, markup=False)
    say(info["description"], highlight=False, markup=False)
    say(f"datasets: {', '.join(info['datasets'])}; protocol: {info['protocol']}; levels: {', '.join(info['levels'])};"
        f" split: {info['splits']}", highlight=False, markup=False)
    if info["params"]:
        say(f"options (suite_params.{name}): " + ", ".join(f"{k}={v!r}" for k, v in info["params"].items()),
            highlight=False, markup=False)
    cols = ("name", "runs", "family", "levels", "needs", "trains")
    print_table(f"{name}: detectors (levels: what each scores; needs: models beside the run's)", cols,
                ([", ".join(v) if isinstance(v := d[c], list) else str(v) for c in cols]
                 for d in info["detector_details"]), no_wrap={"name"})
    tables = [(t, "run: suite_tables.md, report.html") for t in info["tables"]]
    tables += [(o["table"], o["written_by"]) for o in info["other_outputs"]]
    print_table(f"{name}: tables", ("table", "written by"), tables)
