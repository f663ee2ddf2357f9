"""Stage commands on an existing run directory (`haldet sample|auxiliary|features RUN_DIR`) and `haldet inspect`.

A stage command reads the run's config from its manifest (optionally changed by flags, which are then saved to
the manifest with the old config kept in its history), rebuilds each cell's items exactly as the run does,
completes the `generate` records it depends on, and computes the stage for the items that lack a current-key
record. Killed at any point, the same command resumes.

`inspect` reports per cell and signal how many items have it, the arrays' shapes and dtypes, and consistency
checks: every record's arrays exist in its shard with the recorded shape, no item has two current records,
samples per item equal K, teacher-forced log-probs match generation's, and how many records are stale (an older
config) or had a sequence longer than the model window.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from haldet.backends.base import Backend
from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.flow.cell import prepare_cell
from haldet.flow.run import check_run_dir
from haldet.signals import Signal
from haldet.stages.base import CellContext, Item, Progress, no_progress
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader
from haldet.stages.plan import providers, stage_class
from haldet.store import RunStore, clean_stale_temps, h5_name
from haldet.util.locking import notify

LOGPROB_TOLERANCE = 1e-3  # teacher-forced vs generation log-prob, nats (float32 batching noise is ~1e-5)


def load_run_config(store: RunStore, overrides: dict[str, dict[str, Any]] | None = None) -> RunConfig:
    """The run's config from its manifest, with section overrides applied (and saved) when given."""
    manifest = store.read_manifest()
    if manifest is None or "config" not in manifest:
        raise HaldetError("no haldet run in this directory (manifest.json missing)", where=str(store.root),
                          hint="create one with `haldet run --out DIR` (a run dir holds manifest.json)")
    data = manifest["config"]
    changed = False
    for section, values in (overrides or {}).items():
        for key, value in values.items():
            if value is not None and data.get(section, {}).get(key) != value:
                data.setdefault(section, {})[key] = value
                changed = True
    try:
        config = RunConfig.model_validate(data)
    except ValueError as exc:
        raise HaldetError(f"invalid setting: {str(exc).splitlines()[0]}", where="command-line options") from None
    if changed:
        with store.lock():  # re-read under the lock: another command may have changed the manifest meanwhile
            manifest = check_run_dir(store, config, update=True)
            manifest.update(config=config.canonical(), config_hash=config.hash())
            store.write_manifest(manifest)
    return config


def cells(store: RunStore, config: RunConfig, progress: Progress) -> list[tuple[CellContext, list[Item]]]:
    """Each (dataset, model) cell's context and items, rebuilt as the run built them."""
    backends: dict[str, Backend] = {}
    out = []
    for model in config.models:
        for dataset in config.datasets:
            _, ctx, items = prepare_cell(config, store, dataset, model, progress, backends)
            out.append((ctx, items))
    return out


def run_stage(run_dir: Path, stage: str, *, overrides: dict[str, dict[str, Any]] | None = None,
              progress: Progress = no_progress) -> list[dict[str, Any]]:
    """Compute `stage` (after any missing `generate` records) for every item of every cell; one summary per cell.
    As in a run, only the parts the run's detectors read are computed; `not_computed` names the others."""
    store = RunStore(run_dir)
    summaries = []
    load_run_config(store)  # no run here: one message, before the lock would create the directory
    with store.lock():  # one command at a time per run; the manifest's config check is a locked read-then-write
        for path in clean_stale_temps(store.root):
            notify(f"removed {path}, a temporary file left by an interrupted write")
        config = load_run_config(store, overrides)
        for ctx, items in cells(store, config, progress):
            attach_generations(items, GenerateStage(ctx).ensure(items))
            runner = stage_class(stage)(ctx)
            runner.ensure(items)
            summaries.append({"dataset": ctx.dataset, "model": ctx.model, "items": len(items),
                              "computed": ctx.counts.stage(stage).computed or 0,
                              "seconds": round(ctx.timings.get(stage, 0.0), 3),
                              "not_computed": runner.unread_parts()})
    return summaries


def inspect_run(run_dir: Path) -> list[dict[str, Any]]:
    """Per cell: signal coverage, array shapes/dtypes, and consistency checks (see module docstring)."""
    store = RunStore(run_dir)
    config = load_run_config(store)
    report = []
    for ctx, items in cells(store, config, no_progress):
        gen = stage_class("generate")(ctx).records(items)
        have_gen = [item for item in items if item.id in gen]
        attach_generations(have_gen, gen)
        loader = EvidenceLoader(ctx, have_gen)
        cell: dict[str, Any] = {"dataset": ctx.dataset, "model": ctx.model, "items": len(items),
                                "signals": {}, "arrays": {}, "checks": {}, "problems": []}
        by_signal = providers()
        for signal in Signal:
            cls = by_signal[signal]
            stage = cls.name
            recs = gen if stage == "generate" else loader.records(stage)
            if signal in cls.arrays:
                name, group = cls.arrays[signal]
                n = sum(1 for r in recs.values() if r.get("shard") and name in r.get("arrays", {name: 0})
                        and group not in r.get("invalid", {}))
            elif stage == "generate":
                n = len(recs)
            else:
                n = sum(v is not None for v in loader(signal, list(recs)))
            cell["signals"][signal.value] = n
        for stage in ("sample", "auxiliary", "features"):
            _check_stage(ctx, items, stage, loader.records(stage), config, cell)
        report.append(cell)
    return report


def _check_stage(ctx: CellContext, items: list[Item], stage: str, recs: dict[str, dict[str, Any]],
                 config: RunConfig, cell: dict[str, Any]) -> None:
    log = ctx.store.log(stage)
    checks: dict[str, Any] = {"records": len(recs)}
    all_ids: Counter[tuple[str, str]] = Counter()
    if log.path.exists():
        with open(log.path, "rb") as fh:
            lines = [json.loads(raw) for raw in fh.read().split(b"\n")[:-1] if raw.strip()]
        current = {r["id"]: r["key"] for r in recs.values()}
        all_ids = Counter((r["id"], r["key"]) for r in lines)
        checks["stale_records"] = sum(1 for r in lines if current.get(r["id"]) != r["key"])
    checks["duplicate_records"] = sum(1 for (i, k), c in all_ids.items() if c > 1 and recs.get(i, {}).get("key") == k)
    arrays_store = ctx.store.arrays(stage)
    by_shard: dict[str, list[dict[str, Any]]] = {}
    for rec in recs.values():
        if rec.get("shard"):
            by_shard.setdefault(rec["shard"], []).append(rec)
    missing = 0
    damaged: list[str] = []
    shapes: dict[str, Counter[str]] = {}
    nbytes = 0
    for shard, shard_recs in by_shard.items():
        path = arrays_store.root / shard
        if not path.exists():
            missing += len(shard_recs)
            continue
        nbytes += path.stat().st_size
        try:
            with h5py.File(path, "r") as fh:
                for rec in shard_recs:
                    group = fh.get(h5_name(rec["id"]))
                    expected = rec.get("arrays") or {"sample_hidden": None}
                    for name, shape in expected.items():
                        if group is None or name not in group:
                            missing += 1
                            continue
                        ds = group[name]
                        if shape is not None and list(ds.shape) != list(shape):
                            missing += 1
                        shapes.setdefault(name, Counter())[f"{list(ds.shape)} {ds.dtype}"] += 1
        except (OSError, KeyError, ValueError, RuntimeError) as exc:  # truncated or overwritten: report, go on
            damaged.append(f"{path} ({len(shard_recs)} items; {type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
    checks["missing_or_mismatched_arrays"] = missing
    checks["damaged_shards"] = len(damaged)
    if damaged:
        cell["problems"].append(f"{stage}: damaged shard(s) {'; '.join(damaged)} -> any run or `haldet {stage}` on "
                                "this run moves them aside and recomputes their items")
    if by_shard:
        checks["bytes_per_item"] = round(nbytes / max(1, sum(len(v) for v in by_shard.values())))
    for name, counter in shapes.items():
        cell["arrays"][f"{stage}/{name}"] = dict(counter)
    if stage == "sample" and recs:
        k = config.sample.k
        checks["wrong_sample_count"] = sum(1 for r in recs.values() if len(r["samples"]) != k)
        checks["sanitised_logits"] = sum(int(r.get("sanitised_logits") or 0) for r in recs.values())
    if stage == "features" and recs:
        gaps = [r["logprob_gap"] for r in recs.values() if r.get("logprob_gap") is not None]
        checks["max_logprob_gap"] = float(np.max(gaps)) if gaps else None
        checks["logprob_mismatch"] = sum(1 for g in gaps if g > LOGPROB_TOLERANCE)
        checks["window_exceeded"] = sum(1 for r in recs.values() if r.get("window"))
        checks["invalid_groups"] = dict(Counter(g for r in recs.values() for g in r.get("invalid", {})))
    bad = [k for k in ("duplicate_records", "missing_or_mismatched_arrays", "wrong_sample_count", "logprob_mismatch")
           if checks.get(k)]
    cell["problems"] += [f"{stage}: {k} = {checks[k]}" for k in bad]
    cell["checks"][stage] = checks
