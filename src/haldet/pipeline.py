"""The whole flow for a run: per (dataset, model) cell, load items, render prompts, run the evidence stages the
selected detectors need, annotate, split, fit/score/evaluate detectors; then write results and the manifest.

A cell that fails (unreachable data, a model that cannot load) is reported and the other cells still finish.
"""

from __future__ import annotations

import datetime as _dt
import gc
import platform
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from haldet import __version__
from haldet.backends.base import Backend
from haldet.backends.openai_client import accumulate_usages
from haldet.backends.select import check_signals
from haldet.config import RunConfig, digest
from haldet.datasets.base import DATASETS, get_adapter
from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError, is_storage_error
from haldet.evaluation.cost import DEFAULT_N, detector_cost, stage_stats
from haldet.evaluation.detect import DetectorRun, make_detector, run_detector
from haldet.evaluation.splits import stratified_split
from haldet.judges.cascade import Cascade
from haldet.limits import cut_off_summary
from haldet.locking import notify
from haldet.prompts import PromptBuilder, demo_pool_size, given_response_prompts, render_prompts
from haldet.provenance import provenance_columns
from haldet.schema import Category
from haldet.signals import Signal, SignalView
from haldet.stages.annotate import AnnotateStage, labels_of
from haldet.stages.base import CellContext, Item, Progress, no_progress
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader, ensure_stages, evidence_key, needed_stages
from haldet.store import RunStore, clean_stale_temps
from haldet.threads import runtime_info

LIBRARIES = ("torch", "transformers", "numpy", "scikit-learn", "h5py", "pydantic", "datasets", "typer", "rich")


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "haldet": __version__}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = "not installed"
    return out


def make_backend(model: str, config: RunConfig) -> Backend:
    from haldet.backends.select import make_backend as select

    return select(model, config)


@dataclass
class CellResult:
    dataset: str
    scenario: str
    model: str
    detectors: list[DetectorRun] = field(default_factory=list)
    label_counts: dict[str, int] = field(default_factory=dict)
    annotation: dict[str, Any] = field(default_factory=dict)
    split_sizes: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)  # per-stage cost stats (haldet.evaluation.cost)
    untimed: list[str] = field(default_factory=list)  # cached detectors whose original timings are unknown
    fingerprint: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    extra_rows: list[dict[str, Any]] = field(default_factory=list)  # a suite's own tables (Suite.extra_rows)


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


def detector_signals(names: list[str], config: RunConfig | None = None) -> frozenset[Signal]:
    """Every signal the named detectors read, as configured (a variant may read less): the evidence a run computes."""
    return frozenset().union(*(_reads(name, config) for name in names))


def _reads(name: str, config: RunConfig | None) -> frozenset[Signal]:
    if config is None:
        return DETECTORS.get(name, where="--detector").requires
    return make_detector(name, config).signals()


def prepare_cell(config: RunConfig, store: RunStore, dataset: str, model: str, progress: Progress,
                 backends: dict[str, Backend]) -> tuple[CellResult, CellContext, list[Item]]:
    """Load a cell's items and render their prompts exactly as the run does (also used by `haldet annotate`,
    which must find the same generation records)."""
    adapter = get_adapter(dataset, config.data_dir, config.dataset_params.get(dataset))
    result = CellResult(dataset=dataset, scenario=adapter.scenario, model=model)
    start = time.perf_counter()
    # few-shot demos come from the rows of the same seeded order past the evaluated limit: never an evaluated item
    n_pool = demo_pool_size(config.prompt.n_shots) if config.limit is not None else 0
    loaded, report = adapter.load(limit=None if config.limit is None else config.limit + n_pool,
                                  seed=config.data_seed, on_bad_row=config.on_bad_row)
    instances, pool = (loaded[: config.limit], loaded[config.limit :]) if config.limit is not None else (loaded, [])
    if not instances:
        raise HaldetError(f"dataset {dataset!r} gave no items", where=f"{report.origin} (split {report.split})",
                          hint=f"check the file(s) with `haldet datasets show {dataset}`; pick another split with "
                               f"--split NAME")
    builder = PromptBuilder(config.prompt)
    result.data = {"origin": report.origin, "split": report.split, "n_items": len(instances),
                   "n_skipped": report.n_skipped, "skipped": report.skipped, "n_filtered": report.n_filtered,
                   "n_demo_pool": len(pool), "prompt_templates": builder.templates.fingerprint(),
                   "fingerprint": digest([i.model_dump(mode="json") for i in instances])}
    load_seconds = time.perf_counter() - start

    def backend_factory() -> Backend:
        if model not in backends:
            backends[model] = make_backend(model, config)
        return backends[model]

    cell = store.cell(dataset, model)
    ctx = CellContext(config=config, dataset=dataset, model=model, store=cell, backend_factory=backend_factory,
                      progress=progress, signals=detector_signals(config.detectors, config))
    ctx.timings["load_data"] = load_seconds
    if config.suite:  # e.g. contexts over the model's window, fitted by the suite's recorded policy
        from haldet.suites.base import get_suite

        instances = get_suite(config.suite).prepare_instances(instances, ctx.backend, config)
    prompts = given_response_prompts(config.tokens, instances, render_prompts(builder, ctx.backend, instances, pool))
    items = [Item(instance=inst, prompt=prompt) for inst, prompt in zip(instances, prompts, strict=True)]
    result.fingerprint = ctx.backend.fingerprint()
    return result, ctx, items


def run_cell(config: RunConfig, store: RunStore, dataset: str, model: str, progress: Progress,
             backends: dict[str, Backend], previous: dict[str, Any] | None = None) -> CellResult:
    """One (dataset, model) cell: every selected detector reads the same evidence, computed once.

    `previous` is this cell's entry in the run's earlier manifest: a fully cached rerun keeps the timings the
    evidence and detectors took when they were computed (cost accounting), instead of a cache-read zero.
    """
    if config.suite:  # a suite's cell: labels from the data, unit levels (haldet/suites/runner.py)
        from haldet.suites.runner import run_suite_cell

        suite_cell: CellResult = run_suite_cell(config, store, dataset, model, progress, backends, previous)
        return suite_cell
    previous = previous or {}
    previous_evidence: dict[str, Any] = previous.get("evidence") or {}
    progress(f"{dataset} | {model}: loading the data and the model", 0)
    result, ctx, items = prepare_cell(config, store, dataset, model, progress, backends)
    progress(f"{dataset} | {model}: {len(items)} items from {result.data['origin']} (split {result.data['split']})",
             0)
    cell = ctx.store
    if hasattr(ctx.backend, "reset_usage"):  # a remote model's calls and cost are reported per cell
        ctx.backend.reset_usage()

    generate = GenerateStage(ctx)
    gen_records = generate.ensure(items)
    items = [item for item in items if item.id in gen_records]  # failed remote calls: no answer, not evaluated
    if not items:  # nothing to label or score: the cell ends here, its failures listed (outcome summary)
        result.counts, result.timings = dict(ctx.counts), dict(ctx.timings)
        if hasattr(ctx.backend, "usage_report"):
            result.data["backend_usage"] = ctx.backend.usage_report()
        result.error = "no item got an answer from the model (see generate.failed.jsonl)"
        return result
    attach_generations(items, gen_records)
    result.data["generation"] = cut_off_summary(
        config, [(item.instance, item.generation.finish_reason if item.generation else "") for item in items])
    annotate = AnnotateStage(ctx)
    labels = labels_of(annotate.ensure(items))
    result.annotation = annotate.summary(labels)  # per judge, failures, judge tokens/cost
    result.annotation["usage"] = accumulate_usages((previous.get("annotation") or {}).get("usage"),
                                                   result.annotation["usage"])  # summed over reruns
    result.label_counts = result.annotation["total"]

    binary = {i: int(lab.category is Category.HALLUCINATION) for i, lab in labels.items()
              if lab.category in (Category.CORRECT, Category.HALLUCINATION)}
    if not binary:  # nothing to evaluate a detector on: say why instead of an empty table
        result.error = no_usable_labels(result)
        result.timings, result.counts = dict(ctx.timings), dict(ctx.counts)
        return result
    ev = config.evaluation
    split = stratified_split(binary, ev.split, ev.split_seed)
    cell.write_json("split.json", {"seed": ev.split_seed, "fractions": list(ev.split), **split})
    result.split_sizes = {k: len(v) for k, v in split.items()}

    ctx.split, ctx.labels = split, binary
    labelled = [item for item in items if item.id in binary]
    # only the evidence stages the selected detectors read, only for labelled items lacking a current record
    requires = {name: _reads(name, config) for name in config.detectors}
    stage_records = ensure_stages(ctx, labelled, needed_stages(ctx.signals or ()))
    stage_records[GenerateStage.name] = {i.id: gen_records[i.id] for i in labelled}
    result.evidence = {name: stage_stats(name, recs, wall_seconds=ctx.timings.get(name),
                                         computed=ctx.counts.get(f"{name}_computed"),
                                         previous=previous_evidence.get(name))
                       for name, recs in stage_records.items()}
    view = SignalView(ids=[i.id for i in labelled], instances=[i.instance for i in labelled],
                      generations=[i.generation for i in labelled if i.generation is not None],
                      loader=EvidenceLoader(ctx, labelled), labels=np.array([binary[i.id] for i in labelled]))
    advance = progress(f"detectors [{dataset} | {model}]", len(config.detectors))
    for name in config.detectors:
        try:
            ev_key = evidence_key(ctx, labelled, needed_stages(requires[name]))
            run = run_detector(name, config, cell, view, split, binary, ev_key, progress=progress)
        except (ValueError, RuntimeError) as exc:  # a detector bug or bad parameter: reported, no number
            run = DetectorRun(name=name, family="?", error=f"{type(exc).__name__}: {exc}")
        if run.cached and not _carry_timings(run, previous):
            result.untimed.append(name)
        result.detectors.append(run)
        advance(1)
    result.timings = dict(ctx.timings)
    result.counts = dict(ctx.counts)
    if hasattr(ctx.backend, "usage_report"):  # a remote target model: calls, tokens, cost, breaker state
        result.data["backend_usage"] = ctx.backend.usage_report()
    return result


def no_usable_labels(result: CellResult) -> str:
    """Why a cell has no correct/hallucination label: the label counts, the share cut off by the token limit,
    and what to change."""
    counts = ", ".join(f"{n} {c}" for c, n in sorted(result.label_counts.items())) or "no labels"
    gen = result.data.get("generation") or {}
    text = f"no usable label (correct or hallucination): {counts}"
    if gen.get("n_cut"):
        text += f"; {gen['n_cut']}/{gen['n']} answers were cut off at the token limit (raise {gen.get('setting')})"
    elif result.label_counts.get("invalid"):
        text += "; see the judges' reasons in annotate.jsonl (an LLM judge, --judge-model, decides open answers)"
    return text


def _carry_timings(run: DetectorRun, previous: dict[str, Any]) -> bool:
    """A cached detector took no time now: keep the fit/score seconds from when its scores were computed.
    False when the earlier run recorded none for these scores (the cost is then unknown, not zero)."""
    for entry in previous.get("detectors") or []:
        if entry.get("name") == run.name and entry.get("key") == run.key and entry.get("timing_known", True):
            run.fit_seconds = float(entry.get("fit_s") or 0.0)
            run.score_seconds = float(entry.get("score_s") or 0.0)
            return True
    return False


def result_rows(cell: CellResult, cost_n: int = DEFAULT_N) -> list[dict[str, Any]]:
    """The tidy results: one row per (dataset, scenario, model, detector, family, metric), with the metric's
    value, CI, N, positives and coverage, and the detector's cost columns on this cell (haldet.evaluation.cost)."""
    rows = []
    for run in cell.detectors:
        timed = run.name not in cell.untimed
        cost = detector_cost(DETECTORS.get(run.name, where="--detector").requires, cell.evidence,
                             fit_s=round(run.fit_seconds, 6) if timed else None,
                             score_s=round(run.score_seconds, 6) if timed else None,
                             n_scored=run.n_scored, n=cost_n) if not run.error else {}
        if not timed and not run.error:
            cost["cost_note"] = "scores read from an earlier run's cache that recorded no fit/score timings"
        for m in run.metrics:
            rows.append({
                "dataset": cell.dataset, "scenario": cell.scenario, "model": cell.model,
                "detector": run.name, "family": run.family, "metric": m.metric, "level": run.level,
                "value": m.value, "ci_low": m.ci_low, "ci_high": m.ci_high, "n": m.n, "n_pos": m.n_pos,
                "coverage": m.coverage, "fit_s": round(run.fit_seconds, 4), "score_s": round(run.score_seconds, 4),
                "note": "; ".join(n for n in (m.note, str(run.meta.get("note") or "")) if n), **cost,
                **provenance_columns(run.name, run.identity),
                **({"train_labels": run.train_labels} if run.train_labels else {}),
            })
    base = {"dataset": cell.dataset, "scenario": cell.scenario, "model": cell.model}
    return rows + [{**base, **row} for row in cell.extra_rows]


def validate_names(config: RunConfig) -> None:
    """Fail before any work on unknown dataset or detector names."""
    if config.suite:
        from haldet.suites.base import get_suite

        get_suite(config.suite)
    for name in config.dataset_params:
        DATASETS.get(name, where="dataset_params")
    for name in config.datasets:
        get_adapter(name, config.data_dir, config.dataset_params.get(name))  # unknown name or option: fail now
    for name in config.detectors:
        DETECTORS.get(name, where="--detector")
    Cascade.from_config(config.judge)  # an LLM judge without a model, a missing template dir: fail before generating
    check_signals(config)  # hidden-state detectors on an API model: fail before any work


def run(config: RunConfig, out: Path, *, update: bool = False, progress: Progress = no_progress,
        on_cell: Callable[[CellResult], None] | None = None, executor: str = "serial",
        ray_address: str | None = None) -> tuple[list[dict[str, Any]], list[CellResult]]:
    """`executor`: serial (cells one after another in this process) or ray (cells and item shards of the evidence
    stages as Ray tasks: `haldet.executors.ray_executor`); both write through the same keyed store.

    Holds the run's lock throughout (a second process on the same directory waits, then reuses what this one
    computed); a run that raises is recorded in the manifest as status "failed" with the reason."""
    if executor not in ("serial", "ray"):
        raise HaldetError(f"unknown executor {executor!r}", where="--executor", hint="serial or ray")
    validate_names(config)
    store = RunStore(out)
    with store.lock():
        cleaned = clean_stale_temps(store.root)
        if cleaned:
            notify(f"removed {len(cleaned)} temporary file(s) left by an interrupted write in {store.root}")
        manifest = check_run_dir(store, config, update=update)
        if manifest.get("status") == "running":  # we hold the lock, so its writer is gone
            notify(f"the previous run in {store.root} stopped without finishing (killed?); resuming from what it "
                   "wrote")
        manifest.update({"config": config.canonical(), "config_hash": config.hash(), "versions": library_versions(),
                         "runtime": runtime_info(),
                         "created": manifest.get("created", _now()), "status": "running", "error": None})
        store.write_manifest(manifest)
        with store.recording_failure(manifest):
            return _run_cells(config, store, manifest, progress, on_cell, executor, ray_address)


def _run_cells(config: RunConfig, store: RunStore, manifest: dict[str, Any], progress: Progress,
               on_cell: Callable[[CellResult], None] | None, executor: str,
               ray_address: str | None) -> tuple[list[dict[str, Any]], list[CellResult]]:
    started = time.perf_counter()
    previous = {(c.get("dataset"), c.get("model")): c for c in manifest.get("cells") or []}
    if executor == "ray":
        from haldet.executors.ray_executor import ray_cells

        finished = ray_cells(config, store.root, previous, address=ray_address)
    else:
        finished = serial_cells(config, store, previous, progress)
    order = {(d, m): i for i, (m, d) in enumerate((m, d) for m in config.models for d in config.datasets)}
    cells: list[CellResult] = []
    rows: list[dict[str, Any]] = []
    for cell in finished:
        cells.append(cell)
        cells.sort(key=lambda c: order[(c.dataset, c.model)])  # the serial order, whatever finished first
        rows = [row for c in cells for row in result_rows(c)]
        # results and manifest after every cell: a crash later keeps every finished cell
        store.write_results(rows)
        manifest["cells"] = [_cell_entry(c) for c in cells]
        store.write_manifest(manifest)
        if on_cell is not None:
            on_cell(cell)
    store.write_results(rows)
    manifest.update({
        "status": "done", "finished": _now(), "seconds": round(time.perf_counter() - started, 3),
        "cells": [_cell_entry(c) for c in cells],
        "failed_cells": sum(1 for c in cells if c.error),
    })
    store.write_manifest(manifest)
    return rows, cells


def serial_cells(config: RunConfig, store: RunStore, previous: dict[tuple[Any, Any], Any],
                 progress: Progress) -> Iterator[CellResult]:
    """Every (dataset, model) cell in this process, model-major: each model is loaded once and released before
    the next. A failing cell is reported and the others still run (a single cell's error is raised)."""
    backends: dict[str, Backend] = {}
    n_cells = len(config.models) * len(config.datasets)
    for model in config.models:
        for dataset in config.datasets:
            yield guarded_cell(config, store, dataset, model, progress, backends, previous.get((dataset, model)),
                               raise_errors=n_cells == 1)
        backends.pop(model, None)
        gc.collect()


def guarded_cell(config: RunConfig, store: RunStore, dataset: str, model: str, progress: Progress,
                 backends: dict[str, Backend], previous: dict[str, Any] | None, *,
                 raise_errors: bool) -> CellResult:
    """`run_cell`, with a failure turned into a cell carrying its error (unless `raise_errors`)."""
    try:
        return run_cell(config, store, dataset, model, progress, backends, previous=previous)
    except HaldetError as exc:
        if raise_errors:
            raise
        return CellResult(dataset=dataset, scenario=_scenario_of(dataset), model=model, error=exc.message)
    except Exception as exc:  # any other failure of one cell is reported; the other cells still run
        if raise_errors or is_storage_error(exc):  # a full or read-only disk fails every cell: stop
            raise
        cell = CellResult(dataset=dataset, scenario=_scenario_of(dataset), model=model,
                          error=f"{type(exc).__name__}: {exc}")
        cell.data["traceback"] = traceback.format_exc(limit=8)
        return cell


def _scenario_of(dataset: str) -> str:
    try:
        return str(DATASETS.get(dataset, where="--dataset").scenario)
    except HaldetError:
        return "?"


def _cell_entry(c: CellResult) -> dict[str, Any]:
    """A cell's manifest entry: what ran, how long each stage took (`stage_seconds`: this run's wall time;
    `evidence`: per-item cost stats that survive caching), and each detector's score key and timings."""
    return {"dataset": c.dataset, "scenario": c.scenario, "model": c.model, "error": c.error, "data": c.data,
            "model_fingerprint": c.fingerprint, "labels": c.label_counts,
            "annotation": c.annotation, "split": c.split_sizes,
            "stage_seconds": c.timings, "computed": c.counts, "evidence": c.evidence,
            "detectors": [{"name": d.name, "family": d.family, "level": d.level, "key": d.key, "n_scored": d.n_scored,
                           "fit_s": d.fit_seconds, "score_s": d.score_seconds,
                           "timing_known": d.name not in c.untimed, "cached": d.cached, "error": d.error,
                           "identity": d.identity, "meta": d.meta} for d in c.detectors]}
