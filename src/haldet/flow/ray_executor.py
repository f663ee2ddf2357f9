"""`haldet run --executor ray`: (dataset, model) cells, and item shards of the evidence stages within a cell, as Ray
tasks with declared resources (optional extra `ray`; docs/backends.md).

Nothing here schedules or talks RPC itself: Ray places the tasks; every task writes through the same store contract
as the serial run (per-item keyed records, appends under the cell's stage lock, HDF5 shards renamed into place), so
a Ray run equals the serial run item for item (`haldet.flow.executors` holds the serial executor and the signature
both share). A cell task runs `haldet.flow.cell.guarded_cell` on a worker; when one of its evidence stages
(generate, sample, auxiliary, features) has more than `shard_size` items to compute, the stage hands them to
`ShardRunner`, which runs one Ray task per shard and waits. A shard task recomputes only what its items
lack, so when a worker dies mid-shard Ray retries the task (`max_retries`) and the retry computes exactly the items
the dead worker had not written: no duplicates, nothing lost. Whatever a shard still could not compute is computed
by the cell itself afterwards (the ordinary serial path).

Cluster: `--ray-address` / `$RAY_ADDRESS` joins an existing cluster (`ray start --head` on one machine,
`ray start --address HEAD:6379` on the others; every node needs haldet, the models and the run directory on a shared
filesystem); without one a local cluster is started with the machine's CPUs. Each cell and shard task declares
`num_cpus=1` and, for a model on a GPU (`--device cuda`), `num_gpus=1`; GPU cells shard their stages only when
the cluster has more GPUs than cells (`can_shard`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.flow.cell import CellResult, guarded_cell, prepare_cell, scenario_of
from haldet.stages.base import SHARD_RUNNER, Progress, no_progress
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.plan import stage_class
from haldet.store import RunStore
from haldet.util.locking import notify

SHARD_SIZE = 32  # items per evidence-stage shard task (override: $HALDET_RAY_SHARD_SIZE)
TASK_RETRIES = 3  # re-runs of a task whose worker died (a shard task recomputes only what is missing)
PROGRESS_SECONDS = 30.0  # a line on the driver this often while cells run (also in log files)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise HaldetError("the ray executor needs Ray, which is not installed", where="--executor ray",
                          hint="pip install 'haldet[ray]' (or run with the default --executor serial)") from None
    return ray


def resources(config: RunConfig) -> dict[str, Any]:
    """What one cell or shard task declares: a CPU, and a GPU when the model runs on one."""
    return {"num_cpus": 1, "num_gpus": 1 if config.device.startswith("cuda") else 0}


def can_shard(config: RunConfig, cluster: dict[str, float]) -> bool:
    """Whether a cell may hand its stages to shard tasks. A cell on a GPU holds its GPU while it waits for its
    shards, which need GPUs of their own: with no more GPUs in the cluster than cells, every GPU could be held by
    a waiting cell and no shard could ever start. Such cells then compute their stages themselves (cells still
    run in parallel, one per GPU)."""
    if not resources(config)["num_gpus"]:
        return True
    return cluster.get("GPU", 0) > len(config.models) * len(config.datasets)


def connect(address: str | None) -> Any:
    ray = import_ray()
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                     runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
        except ConnectionError as exc:
            raise HaldetError(f"cannot reach the Ray cluster at {address}: {exc}", where="--ray-address",
                              hint="check the address (HEAD:6379 of `ray start --head`), or leave it out to start "
                                   "a local cluster") from None
    return ray


def ray_cells(config: RunConfig, store: RunStore, previous: dict[tuple[Any, Any], Any], progress: Progress, *,
              address: str | None = None) -> Iterator[CellResult]:
    """Every cell as a Ray task; yields each `CellResult` as it finishes (the driver writes results/manifest).
    `progress` bars cannot cross to the workers: the driver prints a line per finished cell and every
    `PROGRESS_SECONDS` instead."""
    out = store.root
    shard_size = int(os.environ.get("HALDET_RAY_SHARD_SIZE") or SHARD_SIZE)
    ray = connect(address)
    shard_size = shard_size if can_shard(config, ray.cluster_resources()) else 0
    task = ray.remote(max_retries=TASK_RETRIES)(_cell_task).options(**resources(config))
    cfg = config.canonical()
    pending = {task.remote(cfg, str(out), dataset, model, previous.get((dataset, model)), shard_size,
                           len(config.models) * len(config.datasets) == 1): (dataset, model)
               for model in config.models for dataset in config.datasets}
    total = len(pending)
    have = ray.cluster_resources()
    shards = f"stage shards of {shard_size} items" if shard_size else "no stage shards: no more GPUs than cells"
    notify(f"ray: {total} cell(s) submitted ({have.get('CPU', 0):g} CPUs, {have.get('GPU', 0):g} GPUs in the "
           f"cluster; {shards}); each cell's result is written as it finishes")
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=PROGRESS_SECONDS)
        if not done:
            notify(f"ray: {total - len(pending)}/{total} cell(s) finished, still running: "
                   + ", ".join(f"{d} | {m}" for d, m in pending.values()))
        for ref in done:
            dataset, model = pending.pop(ref)
            notify(f"ray: cell {dataset} | {model} finished ({total - len(pending)}/{total})")
            try:
                yield ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # the cell's own error, raised on the worker
                cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                if isinstance(cause, HaldetError) and len(config.models) * len(config.datasets) == 1:
                    raise cause from None
                yield CellResult(dataset=dataset, scenario=scenario_of(dataset), model=model,
                                 error=cause.message if isinstance(cause, HaldetError) else f"{type(cause).__name__}: "
                                 f"{cause}")
            except ray.exceptions.RayError as exc:  # the worker died more often than the retries allow
                yield CellResult(dataset=dataset, scenario=scenario_of(dataset), model=model,
                                 error=f"Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")


def _cell_task(cfg: dict[str, Any], out: str, dataset: str, model: str, previous: dict[str, Any] | None,
               shard_size: int, single: bool) -> Any:
    """One cell on a Ray worker, its evidence stages sharded over further tasks."""
    config = RunConfig.model_validate(cfg)
    token = SHARD_RUNNER.set(ShardRunner(cfg, out, dataset, model, shard_size) if shard_size else None)
    try:
        return guarded_cell(config, RunStore(Path(out)), dataset, model, no_progress, {}, previous,
                            raise_errors=single)
    finally:
        SHARD_RUNNER.reset(token)


class ShardRunner:
    """Computes a stage's missing items as Ray tasks of `shard_size` items (called by `Stage.ensure`)."""

    def __init__(self, cfg: dict[str, Any], out: str, dataset: str, model: str, shard_size: int) -> None:
        self.cfg, self.out, self.dataset, self.model, self.shard_size = cfg, out, dataset, model, shard_size

    def __call__(self, stage: Any, todo: list[Any]) -> None:
        ids = [item.id for item in todo]
        if len(ids) <= self.shard_size:
            return  # one shard: the cell computes it itself
        ray = import_ray()
        task = ray.remote(max_retries=TASK_RETRIES)(_shard_task).options(
            **resources(RunConfig.model_validate(self.cfg)))
        refs = [task.remote(self.cfg, self.out, self.dataset, self.model, stage.name, ids[i:i + self.shard_size])
                for i in range(0, len(ids), self.shard_size)]
        start = time.perf_counter()
        computed = 0
        for ref in refs:
            try:
                n, failed = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # its remaining items are computed by the cell (the serial path) right after
            computed += n
            if failed:
                stage.ctx.counts.stage(stage.name).add_failed(failed)
        stage.ctx.timings[stage.name] = stage.ctx.timings.get(stage.name, 0.0) + time.perf_counter() - start
        stage.ctx.counts.stage(stage.name).add_sharded(computed)


def _shard_task(cfg: dict[str, Any], out: str, dataset: str, model: str, stage_name: str,
                ids: list[str]) -> tuple[int, int]:
    """Compute one shard of a stage on a worker: only the items of `ids` that lack a current record.
    Returns (items computed, items that failed)."""
    config = RunConfig.model_validate(cfg)
    _, ctx, items = prepare_cell(config, RunStore(Path(out)), dataset, model, no_progress, {})
    wanted = set(ids)
    shard = [item for item in items if item.id in wanted]
    if stage_name != GenerateStage.name:
        gens = GenerateStage(ctx).records(shard)
        shard = [item for item in shard if item.id in gens]
        attach_generations(shard, gens)
    stage = stage_class(stage_name)(ctx)
    return stage.compute_shard(shard)
