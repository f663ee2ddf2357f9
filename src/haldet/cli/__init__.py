"""The `haldet` command line (typer + rich): this module assembles the app from one module per command group.

User errors (`HaldetError`) and file-system errors (`OSError`: read-only or full disk, permission denied) are
printed as one message and exit with status 2, without a traceback.

Where a command lives: `run` in `cli.run`; `report`, `compare` in `cli.reports`; `annotate` in `cli.annotate`;
`view` in `cli.view`; `sample`, `auxiliary`, `features`, `inspect` in `cli.stages`; the groups `datasets`,
`detectors`, `suites`, `presets` in the module of that name; a suite's own group (`hallulens`) in its folder's
`commands.py`, found by `haldet.suites.groups.command_groups` and imported by name. All of them print through
`haldet.util.console` and never import this module.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from haldet.cli import annotate, datasets, detectors, presets, reports, run, stages, suites, view
from haldet.cli.options import Threads
from haldet.errors import HaldetError, storage_error
from haldet.suites.groups import command_groups
from haldet.util.console import console, print_error
from haldet.util.threads import configure_threads
from haldet.version import __version__


class _Root(TyperGroup):
    """The root command group; once built, no flag anywhere in the tree shows a `<bool>` type label in its help
    (an on/off switch takes no value)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        stack: list[Any] = [self]
        while stack:
            cmd = stack.pop()
            for param in cmd.params:
                if getattr(param, "is_flag", False):
                    param.metavar = ""
            cmd.get_help_option = _untyped(cmd.get_help_option)
            stack.extend(getattr(cmd, "commands", {}).values())


def _untyped(get_help_option: Any) -> Any:
    """`--help`, which click adds to every command, without a type label either."""

    def wrapped(ctx: Any) -> Any:
        option = get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    return wrapped


app = typer.Typer(
    cls=_Root,
    help="Benchmark hallucination detectors for LLMs: generate answers, label them, score them with "
         "detectors, and report AUROC/AUPR/FPR@95 with bootstrap CIs.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(datasets.app, name="datasets")
app.add_typer(detectors.app, name="detectors")
app.add_typer(suites.app, name="suites")
app.add_typer(presets.app, name="presets")
for group, module in command_groups().items():  # a suite's own commands, by its folder's name
    app.add_typer(importlib.import_module(module).app, name=group)
# registration order is the order of `haldet --help`
for command in (run.run, reports.report, reports.compare, annotate.annotate, stages.sample, stages.auxiliary,
                stages.features, stages.inspect, view.view):
    app.command()(command)


def _version(value: bool) -> None:
    if value:
        print(f"haldet {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    threads: Annotated[int | None, Threads] = None,
) -> None:
    """haldet: one fair protocol for hallucination detectors."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    signal.signal(signal.SIGTERM, _terminated)

    configure_threads(threads)


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM (kill, a job scheduler) stops like Ctrl-C: the manifest records the run as failed ("interrupted")
    and what was written is kept."""
    raise KeyboardInterrupt


def entry() -> None:
    """Console-script entry point: user errors become one message and exit code 2."""
    try:
        app()
    except SystemExit as exc:
        if exc.code == 130 and _typer_interrupt(exc):  # typer turns Ctrl-C into a silent exit 130: say what it means
            console.print("interrupted; everything written so far is kept and the same command resumes from it")
        raise
    except HaldetError as exc:
        print_error(exc.message)
        sys.exit(2)
    except OSError as exc:  # read-only or full disk, no permission: one message naming the path, no traceback
        print_error(storage_error(exc).message)
        sys.exit(2)
    except KeyboardInterrupt:
        console.print("interrupted; everything written so far is kept and a rerun resumes from it")
        sys.exit(130)


def _typer_interrupt(exc: SystemExit) -> bool:
    """Did typer end the command because of a KeyboardInterrupt it caught (`raise Exit(130) from KeyboardInterrupt`)?
    A command that reported its own interrupt (`haldet run`) exits without that cause."""
    return isinstance(getattr(exc.__context__, "__cause__", None), KeyboardInterrupt)
