"""`haldet view`: the local results explorer in the browser (haldet.explorer), read-only over the runs given."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import Annotated

import typer

from haldet.errors import HaldetError
from haldet.explorer.serve import is_loopback, serve
from haldet.util.console import console


def view(
    run_dirs: Annotated[list[Path], typer.Argument(help="One or more run directories written by `haldet run` "
                                                        "(finished, merged or still running).")],
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but loopback exposes the runs' "
                                           "prompts, answers and labels to the network.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (default 0: a free port).", min=0, max=65535)] = 0,
    allow_host: Annotated[list[str] | None, typer.Option(
        help="Another host name the browser may use to reach the explorer (e.g. a machine name behind an SSH "
             "tunnel); repeatable. Requests naming any other host are refused (400), which stops DNS "
             "rebinding.")] = None,
) -> None:
    """Explore runs in the browser: the results table (sortable, filterable), each cell's items (labels, scores,
    ranks; filter by label, split, a detector's false positives/negatives, text), one item's prompt, answer, units,
    samples, auxiliary replies, judge reasoning and every score, and a detector's ROC/PR curves, histograms and
    threshold slider (two side by side with their paired difference). Nothing in the runs is written. See
    docs/explorer.md."""
    try:
        import fastapi  # noqa: F401
        import jinja2  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise HaldetError(f"haldet view needs the optional packages of the `view` extra ({exc.name} is missing)",
                          where="haldet view", hint="pip install 'haldet[view]'") from None
    from haldet.explorer.data import Explorer  # lazy: h5py, pyarrow

    Explorer(run_dirs)  # bad run paths fail here, before anything listens
    if not is_loopback(host):
        console.print(f"[yellow]warning:[/yellow] listening on {host}, not loopback: anyone who can reach this "
                      "machine can read these runs' prompts, answers and labels", highlight=False)

    def ready(line: str) -> None:
        if line.startswith("http"):
            line = f"haldet view: serving {len(run_dirs)} run(s) at {line} (Ctrl-C stops)"
        console.print(line, highlight=False)

    with suppress(KeyboardInterrupt):  # Ctrl-C is how it stops: no "interrupted run" message
        serve(run_dirs, host=host, port=port, on_ready=ready, allow_hosts=allow_host or ())
    console.print("haldet view stopped", highlight=False)
