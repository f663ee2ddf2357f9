"""A tiny typed name -> object registry with a decorator, shared by datasets, judges and detectors.

Built-ins register on import; `Registry.load_builtins` imports the package's modules once so that a new
dataset, judge or detector is one file plus one decorator and nothing else. A registry that suites contribute to
(datasets, detectors, suites: `in_suites=True`) also imports every module of every suite folder
(`haldet.suites.<suite>/`), by name: a suite keeps its own datasets and detectors in its folder and registers them
like any plugin, so the core never imports a suite. Third-party packages register through
entry points in the group named like the package (`haldet.detectors`, `haldet.datasets`, `haldet.judges`): the
entry point's value is a module (its decorators run on import) or a class (registered under the entry point's
name). `origin(name)` says which distribution a plugin came from, `where(name)` the file and line that define it
(`haldet detectors show NAME`, `haldet datasets show NAME --where`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from haldet.errors import HaldetError, UnknownNameError

T = TypeVar("T")

SUITE_FOLDERS = "haldet.suites"  # each sub-package is one suite's folder; imported by name only


@dataclass(frozen=True)
class Location:
    """Where a registered name is defined: the source file and the 1-based line of its `class` (or `def`)."""

    file: Path
    line: int

    def __str__(self) -> str:
        """`file:line`, the file relative to the working directory when it lies below it (an editor opens it)."""
        try:
            shown = self.file.relative_to(Path.cwd())
        except ValueError:
            shown = self.file
        return f"{shown}:{self.line}"


def locate(obj: Any) -> Location | None:
    """The file and the line of the `class`/`def` statement (past its decorators) of a class or function; None for
    an object without Python source (a builtin, a class made at run time)."""
    target = inspect.unwrap(obj)
    try:
        file = inspect.getsourcefile(target)
        lines, first = inspect.getsourcelines(target)
    except (OSError, TypeError):
        return None
    if file is None:
        return None
    offset = next((i for i, text in enumerate(lines) if text.lstrip().startswith(("class ", "def ", "async def "))),
                  0)
    return Location(Path(file).resolve(), max(first, 1) + offset)


class Registry(Generic[T]):
    """Maps registry keys to classes (or factories); lookups of unknown names list the known ones."""

    def __init__(self, kind: str, package: str, *, in_suites: bool = False) -> None:
        self.kind = kind
        self.package = package
        self.in_suites = in_suites  # suite folders hold entries of this kind (their datasets, detectors, suites)
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator: register under `name` and set the class's `name` to it (its registry key)."""

        def decorate(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            obj.name = name  # type: ignore[attr-defined]
            return obj

        return decorate

    def load_builtins(self) -> None:
        """Import every module of the plugin package (and of every suite folder), so their decorators run."""
        if self._loaded:
            return
        self._loaded = True
        _import_modules(self.package)
        if self.in_suites:
            suites = importlib.import_module(SUITE_FOLDERS)
            for folder in pkgutil.iter_modules(suites.__path__):
                if folder.ispkg and not folder.name.startswith("_"):
                    _import_modules(f"{SUITE_FOLDERS}.{folder.name}")
        self._load_plugins()

    def _load_plugins(self) -> None:
        """Entry points of the group `self.package`; a plugin that fails to import is one clear error."""
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.package):
            before = set(self._items)
            try:
                obj = ep.load()
            except Exception as exc:  # any import failure of third-party code: name the plugin, no traceback
                raise HaldetError(f"the {self.kind} plugin {ep.name!r} ({ep.value}) failed to load: "
                                  f"{type(exc).__name__}: {exc}", where=f"entry point group {self.package}",
                                  hint="fix or uninstall the plugin package") from None
            if isinstance(obj, type) and obj not in self._items.values():
                self.register(ep.name)(obj)  # type: ignore[arg-type]
            dist = ep.dist.name if ep.dist is not None else ep.value
            for name in set(self._items) - before or {ep.name}:
                self._origins[name] = f"plugin {dist}"

    def origin(self, name: str) -> str:
        """'built-in' or 'plugin <distribution>'."""
        self.load_builtins()
        return self._origins.get(name, "built-in")

    def where(self, name: str) -> Location | None:
        """The file and line defining the object registered as `name` (None when it has no Python source)."""
        return locate(self.get(name, where=f"{self.kind} name"))

    def get(self, name: str, *, where: str = "") -> T:
        self.load_builtins()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, list(self._items), where=where) from None

    def names(self) -> list[str]:
        self.load_builtins()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        self.load_builtins()
        return name in self._items

    def __iter__(self) -> Iterator[tuple[str, T]]:
        self.load_builtins()
        return iter(sorted(self._items.items()))


def _import_modules(package: str) -> None:
    """Import `package` and each of its modules whose name does not start with an underscore."""
    pkg = importlib.import_module(package)
    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{package}.{mod.name}")
