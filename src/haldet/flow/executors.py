"""Where a run's (dataset, model) cells run: in this process one after another (`serial_cells`) or as Ray tasks
(`haldet.flow.ray_executor.ray_cells`). Both take the same arguments and yield each cell's `CellResult` as it
finishes; `haldet.flow.run` writes results and the manifest after each, whichever executor ran it, and every cell
writes through the same keyed store, so the two give the same records item for item."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any, Protocol

from haldet.backends.base import Backend
from haldet.config import RunConfig
from haldet.errors import UnknownNameError
from haldet.flow.cell import CellResult, guarded_cell
from haldet.flow.ray_executor import ray_cells
from haldet.stages.base import Progress
from haldet.store import RunStore


class Executor(Protocol):
    """The one executor signature: the run's config and store, the manifest's entries of earlier runs' cells by
    (dataset, model), progress bars, and the address of a cluster to join (Ray's; None: start or need none)."""

    def __call__(self, config: RunConfig, store: RunStore, previous: dict[tuple[Any, Any], Any], progress: Progress,
                 *, address: str | None = None) -> Iterator[CellResult]: ...


def serial_cells(config: RunConfig, store: RunStore, previous: dict[tuple[Any, Any], Any], progress: Progress, *,
                 address: str | None = None) -> Iterator[CellResult]:
    """Every (dataset, model) cell in this process, model-major: each model is loaded once and released before
    the next. A failing cell is reported and the others still run (a single cell's error is raised). `address`
    names a Ray cluster: unused here."""
    backends: dict[str, Backend] = {}
    n_cells = len(config.models) * len(config.datasets)
    for model in config.models:
        for dataset in config.datasets:
            yield guarded_cell(config, store, dataset, model, progress, backends, previous.get((dataset, model)),
                               raise_errors=n_cells == 1)
        backends.pop(model, None)
        gc.collect()


EXECUTORS: dict[str, Executor] = {"serial": serial_cells, "ray": ray_cells}


def get_executor(name: str) -> Executor:
    if name not in EXECUTORS:
        raise UnknownNameError("executor", name, list(EXECUTORS), where="--executor")
    return EXECUTORS[name]
