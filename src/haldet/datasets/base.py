"""The dataset registry: `@register("name")` on a `DatasetAdapter` subclass, and `get_adapter` by name.

A plugin or a suite writes its adapter against this module alone: it also names the adapter base
(`adapter.DatasetAdapter`, `adapter.Source`), the row helpers (`rows.require`, `rows.BadRow`, ...) and
`formats.read_table` (docs/api.md), which live in modules of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from haldet.datasets.adapter import DatasetAdapter, Source, check_data_dir
from haldet.datasets.formats import read_table
from haldet.datasets.rows import BadRow, SkipRow, require, require_json
from haldet.registry import Registry

DATASETS: Registry[type[DatasetAdapter]] = Registry("dataset", "haldet.datasets", in_suites=True)


register = DATASETS.register  # class decorator: @register("name")


def get_adapter(name: str, data_dir: str | Path | None = None, params: dict[str, Any] | None = None,
                where: str = "--dataset") -> DatasetAdapter:
    """An adapter instance by registry name (unknown names list the known ones)."""
    return DATASETS.get(name, where=where)(data_dir=data_dir, **(params or {}))


__all__ = ["DATASETS", "BadRow", "DatasetAdapter", "SkipRow", "Source", "check_data_dir", "get_adapter", "read_table",
           "register", "require", "require_json"]
