"""The suites' own command groups, found without importing a suite: `haldet <folder> ...` is the typer `app` of
`suites/<folder>/commands.py`. A module of its own, apart from `base`, because the CLI reads it on every start and
`base` brings the metrics (scikit-learn) with it."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from haldet.registry import SUITE_FOLDERS

COMMANDS = "commands"  # the module of a suite folder that holds its command group (a typer `app`)


def command_groups() -> dict[str, str]:
    """`haldet <folder> ...` -> the module `haldet.suites.<folder>.commands`, for every suite folder that has one.
    Found by file name, importing no suite module: the CLI imports each group's module by name when it assembles
    the app, and that module imports the rest of its folder when one of its commands runs."""
    folders = importlib.import_module(SUITE_FOLDERS)
    found: dict[str, str] = {}
    for folder in pkgutil.iter_modules(folders.__path__):
        if not folder.ispkg or folder.name.startswith("_"):
            continue
        path = [str(Path(p) / folder.name) for p in folders.__path__]
        if any(m.name == COMMANDS for m in pkgutil.iter_modules(path)):
            found[folder.name] = f"{SUITE_FOLDERS}.{folder.name}.{COMMANDS}"
    return found
