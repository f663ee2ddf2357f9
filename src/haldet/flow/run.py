"""A whole run: check names and the run directory, hold its lock, run every (dataset, model) cell through an
executor (`haldet.flow.executors`: serially in this process or as Ray tasks), and write results and the manifest
after every cell, so a crash later keeps every finished cell. A run that raises is recorded in the manifest as
"failed" with the reason."""

from __future__ import annotations

import datetime as _dt
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from haldet.backends.select import check_model_names, check_signals
from haldet.config import RunConfig
from haldet.datasets.base import DATASETS, check_data_dir, get_adapter
from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError
from haldet.flow.cell import CellResult
from haldet.flow.executors import Executor, get_executor
from haldet.flow.results import cell_entry, result_rows, unit_score_rows
from haldet.flow.scoring import make_detector
from haldet.judges.cascade import Cascade
from haldet.models.provenance import loadable, missing_auxiliary
from haldet.presets import load_preset
from haldet.signals import Signal
from haldet.stages.base import Progress, no_progress
from haldet.store import RUN_FORMAT, RunStore, clean_stale_temps
from haldet.suites.base import get_suite
from haldet.text.templates import check_overrides
from haldet.util.locking import notify
from haldet.util.threads import runtime_info
from haldet.util.versions import library_versions


def check_run_dir(store: RunStore, config: RunConfig, *, update: bool) -> dict[str, Any]:
    """A run dir belongs to one config; a different one is refused unless `update` (nothing is deleted:
    records are keyed, so still-valid evidence is reused and the old config is kept in the history)."""
    manifest = store.read_manifest() or {}
    old = manifest.get("config")
    if old is not None:
        previous = RunConfig.model_validate(old)
        changed = previous.diff(config)
        if changed and not update:
            raise HaldetError(
                f"this output directory holds a run with a different config (changed: {', '.join(changed)})",
                where=str(store.root),
                hint="pass a new --out DIR, or --update to re-run here (cached evidence that still matches is "
                     "reused; nothing is deleted)",
            )
        if changed:
            manifest.setdefault("history", []).append({"config_hash": manifest.get("config_hash"),
                                                       "config": old, "replaced_at": _now()})
    return manifest


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def validate_names(config: RunConfig) -> None:
    """Fail before any work on unknown dataset, detector, suite or preset names, a misspelt model alias, a data
    directory that does not exist, or an evaluation setting the protocol cannot take."""
    check_model_names(config)
    check_data_dir(config.data_dir)
    if config.preset:
        load_preset(config.preset, where="preset")
    if config.evaluation.evaluate_on == "all" and not config.suite:
        raise HaldetError("evaluation.evaluate_on: all applies to suites (HalluEntity, VeriGray report on every item)",
                          where="evaluation.evaluate_on",
                          hint="OpenHalDet's protocol evaluates on the test split: set evaluate_on: test, or run a "
                               "suite (--suite NAME)")
    if config.suite and config.evaluation.calibration != "none":
        raise HaldetError(f"calibration {config.evaluation.calibration!r} is fitted on OpenHalDet's response-level "
                          f"protocol; suite {config.suite!r} evaluates its own levels and thresholds",
                          where="evaluation.calibration", hint="leave calibration at none for a suite run")
    if config.suite:
        get_suite(config.suite)
    for name in config.dataset_params:
        DATASETS.get(name, where="dataset_params")
    for name in config.datasets:
        get_adapter(name, config.data_dir, config.dataset_params.get(name))  # unknown name or option: fail now
    for name in config.detectors:
        DETECTORS.get(name, where="--detector")
    check_overrides(config.templates)  # an unknown prompt template name: fail before any work
    # an LLM judge without a model, a missing template dir: fail before generating
    judges = Cascade.from_config(config.judge, config.templates)
    check_auxiliary_models(config)
    check_judge_models(judges, judged_task_types(config, config.datasets))
    requires = {name: _reads(name, config) for name in config.detectors}
    # hidden-state detectors on an API model: fail before any work
    check_signals(config, requires, {name: cls.requires for name, cls in DETECTORS})


def check_auxiliary_models(config: RunConfig) -> None:
    """A detector's auxiliary model (NLI, similarity, BERTScore, ...) found neither as requested nor as its
    fallback fails the run now, before the decoding, not the cell when the detector is scored hours later (a
    detector that gives NaN with the reason without its model, `nan_without_auxiliary`, is left to do so). Files
    only: nothing is loaded here."""
    for name in config.detectors:
        try:
            detector = make_detector(name, config)
        except (ValueError, TypeError):
            continue  # parameters that do not build: reported when it is scored
        if detector.nan_without_auxiliary:
            continue
        for param, requested in missing_auxiliary(detector):
            raise HaldetError(f"detector {name!r} needs the model {requested!r} ({param}), and neither it nor a "
                              "fallback is here: no local copy, no cached snapshot, and the Hugging Face hub cannot "
                              "be reached", where=f"detector_params.{name}.{param}",
                              hint=f"download it while online (it is cached for later runs), point {param} at a "
                                   f"local copy, or leave {name} out")


def judged_task_types(config: RunConfig, datasets: list[str]) -> frozenset[str]:
    """The task types of the items the run's judges label in these datasets (none in a suite, whose procedure
    labels its own items)."""
    if config.suite:
        return frozenset()
    return frozenset(get_adapter(name, config.data_dir, config.dataset_params.get(name)).task_type
                     for name in datasets)


def check_judge_models(judges: Cascade, task_types: frozenset[str]) -> None:
    """A local model a judge loads for these datasets' items (the similarity judge's sentence encoder, a local LLM
    judge) that is not here fails the run now, not when the first answers are labelled after the decoding."""
    for judge, model in judges.local_models(task_types):
        if not loadable(model):
            raise HaldetError(f"judge {judge!r} needs the model {model!r} to label these datasets' answers, and it "
                              "is not here: no local copy, no cached snapshot, and the Hugging Face hub cannot be "
                              "reached", where="judge",
                              hint="run `make setup` (it installs the embedded models), download the model while "
                                   "online, or choose the judges with --judge")


def _reads(name: str, config: RunConfig) -> frozenset[Signal]:
    """The signals a selected detector reads as configured (an ensemble: its members'); its class declaration when
    its parameters do not build (that error is reported when it is scored)."""
    try:
        return make_detector(name, config).signals()
    except (ValueError, TypeError):
        return DETECTORS.get(name, where="--detector").requires


def run(config: RunConfig, out: Path, *, update: bool = False, progress: Progress = no_progress,
        on_cell: Callable[[CellResult], None] | None = None, executor: str = "serial",
        ray_address: str | None = None) -> tuple[list[dict[str, Any]], list[CellResult]]:
    """`executor`: serial (cells one after another in this process) or ray (cells and item shards of the evidence
    stages as Ray tasks); both (`haldet.flow.executors`) write through the same keyed store.

    Holds the run's lock throughout (a second process on the same directory waits, then reuses what this one
    computed); a run that raises is recorded in the manifest as status "failed" with the reason."""
    cells_of = get_executor(executor)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise HaldetError("the run directory is a file", where=str(out),
                          hint="pass a directory to --out: a new path (created) or a run directory (resumed)")
    validate_names(config)
    store = RunStore(out)
    with discarded_if_empty(out):
        return _locked_run(config, store, update, progress, on_cell, cells_of, ray_address)


@contextmanager
def discarded_if_empty(root: Path) -> Iterator[None]:
    """A run refused for bad input before it wrote any data (a data file it cannot read, a suite without its data)
    leaves no directory behind when it created it: only its lock and a manifest saying it failed would be in it.
    A crash or an interrupt keeps the directory: its manifest records the failure."""
    created = not root.exists()
    try:
        yield
    except HaldetError:
        if created and root.is_dir() and not any(p.is_file() and p.name not in ("run.lock", RunStore.MANIFEST)
                                                 for p in root.rglob("*")):
            shutil.rmtree(root, ignore_errors=True)
        raise


def _locked_run(config: RunConfig, store: RunStore, update: bool, progress: Progress,
                on_cell: Callable[[CellResult], None] | None, cells_of: Executor,
                ray_address: str | None) -> tuple[list[dict[str, Any]], list[CellResult]]:
    with store.lock():
        cleaned = clean_stale_temps(store.root)
        if cleaned:
            notify(f"removed {len(cleaned)} temporary file(s) left by an interrupted write in {store.root}")
        manifest = check_run_dir(store, config, update=update)
        if manifest.get("status") == "running":  # we hold the lock, so its writer is gone
            notify(f"the previous run in {store.root} stopped without finishing (killed?); resuming from what it "
                   "wrote")
        manifest.update({"run_format": RUN_FORMAT, "config": config.canonical(), "config_hash": config.hash(),
                         "preset": load_preset(config.preset, where="preset").record() if config.preset else None,
                         "versions": library_versions(),
                         "runtime": runtime_info(),
                         "created": manifest.get("created", _now()), "status": "running", "error": None})
        store.write_manifest(manifest)
        with store.recording_failure(manifest):
            return _run_cells(config, store, manifest, progress, on_cell, cells_of, ray_address)


def _run_cells(config: RunConfig, store: RunStore, manifest: dict[str, Any], progress: Progress,
               on_cell: Callable[[CellResult], None] | None, cells_of: Executor,
               ray_address: str | None) -> tuple[list[dict[str, Any]], list[CellResult]]:
    started = time.perf_counter()
    previous = {(c.get("dataset"), c.get("model")): c for c in manifest.get("cells") or []}
    finished = cells_of(config, store, previous, progress, address=ray_address)
    order = {(d, m): i for i, (m, d) in enumerate((m, d) for m in config.models for d in config.datasets)}
    cells: list[CellResult] = []
    rows: list[dict[str, Any]] = []
    for cell in finished:
        cells.append(cell)
        cells.sort(key=lambda c: order[(c.dataset, c.model)])  # the serial order, whatever finished first
        rows = [row for c in cells for row in result_rows(c, max_orientation=config.report.max_orientation)]
        # results and manifest after every cell: a crash later keeps every finished cell
        store.write_results(rows)
        store.write_unit_scores([row for c in cells for row in unit_score_rows(c)])
        manifest["cells"] = [cell_entry(c) for c in cells]
        store.write_manifest(manifest)
        if on_cell is not None:
            on_cell(cell)
    if config.suite and len(cells) > 1:  # tables across cells (e.g. HalluEntity's proxy-model correlation)

        rows += get_suite(config.suite).run_rows([row for c in cells for row in unit_score_rows(c)])
    store.write_results(rows)
    manifest.update({
        "status": "done", "finished": _now(), "seconds": round(time.perf_counter() - started, 3),
        "cells": [cell_entry(c) for c in cells],
        "failed_cells": sum(1 for c in cells if c.error),
    })
    store.write_manifest(manifest)
    return rows, cells
