"""A tiny typed name -> object registry with a decorator, shared by datasets, judges and detectors.

Plugins register on import; `Registry.load_builtins` imports the package's modules once so that a new
dataset, judge or detector is one file plus one decorator and nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from haldet.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps registry keys to classes (or factories); lookups of unknown names list the known ones."""

    def __init__(self, kind: str, package: str) -> None:
        self.kind = kind
        self.package = package
        self._items: dict[str, T] = {}
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
        """Import every module of the plugin package so their decorators run."""
        if self._loaded:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{self.package}.{mod.name}")

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
