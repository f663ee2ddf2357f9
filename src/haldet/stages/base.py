"""Evidence stages: compute a per-item output once, keyed by every input that changes it, resumably.

A stage names its output file (`<stage>.jsonl` in the cell), defines `key(item)` and `compute(batch)`; the
shared `ensure` finds the items whose record with the current key is missing, computes them in batches with a
progress bar, and appends each batch's records as soon as they exist. Killed at any point, a rerun computes
exactly the missing items. Two processes running the same stage on the same cell take turns (an exclusive lock
on `<stage>.lock`, haldet.util.locking), and the second computes only what the first left missing: no item is written
twice.

Every `ensure` also checks the HDF5 shards its current records point at: a shard that no longer opens or lacks
a recorded array is moved aside (`<shard>.damaged`), its records are dropped from the log, and those items are
recomputed now, with a message. So a damaged shard is repaired by any run that depends on it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar

from haldet.backends.base import AnswerEvidence, Backend, EvidenceRequest, ForwardOutput
from haldet.config import RunConfig
from haldet.registry import Registry
from haldet.schema import Generation, Instance
from haldet.signals import Signal
from haldet.stages.counts import StageTally
from haldet.store import CellStore
from haldet.util import locking
from haldet.util.memory import release_memory
from haldet.util.progress import stored as mark_stored

Progress = Callable[[str, int], Callable[[int], None]]  # (description, total) -> advance(n)
# Set by an executor that computes item shards elsewhere (haldet.flow.ray_executor): (stage, items) -> None.
ShardRunner = Callable[["Stage", list["Item"]], None]
SHARD_RUNNER: contextvars.ContextVar[ShardRunner | None] = contextvars.ContextVar("haldet_shard_runner", default=None)


def no_progress(description: str, total: int) -> Callable[[int], None]:
    return lambda n: None


@dataclass
class Item:
    """One benchmark item as the stages see it: the instance, its rendered prompt, and (later) its answer."""

    instance: Instance
    prompt: str
    generation: Generation | None = None

    @property
    def id(self) -> str:
        return self.instance.id


@dataclass
class CellContext:
    """Everything a stage may use for one (dataset, model) cell. The backend is created on first use."""

    config: RunConfig
    dataset: str
    model: str
    store: CellStore
    backend_factory: Callable[[], Backend]
    progress: Progress = no_progress
    # the signals the selected detectors read: stages compute only those parts (None = everything configured)
    signals: frozenset[Signal] | None = None
    # the cell's split and binary training labels, set by the cell flow once known (few-shot verdict examples)
    split: dict[str, list[str]] | None = None
    labels: dict[str, int] | None = None
    # the run's detector instances, set by the run flow: stages read what they ask of them (the verdict stage's
    # asks) here rather than building detectors themselves, which would import upwards
    detectors: Sequence[Any] = ()
    timings: dict[str, float] = field(default_factory=dict)
    # per stage: items computed, failed, ... (`StageTally`; as a mapping, the manifest's flat `computed` form)
    counts: StageTally = field(default_factory=StageTally)
    shard_runner: ShardRunner | None = field(default_factory=SHARD_RUNNER.get)
    # another model that draws the samples (`sample.model`); None = the cell's own model
    sampler: OtherSampler | None = None
    _backend: Backend | None = None

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.backend_factory()
        return self._backend


@dataclass
class OtherSampler:
    """A model other than the cell's that draws the stochastic samples: its backend (created on first use) and
    how an item's prompt is rendered for it (its own chat template; the stored prompt is the cell model's)."""

    model: str
    backend_factory: Callable[[], Backend]
    render: Callable[[Item], str]
    _backend: Backend | None = None

    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.backend_factory()
        return self._backend


class Stage:
    """Base class of an evidence stage. A registered stage (`@STAGES.register(name)`) declares what it provides,
    so the planner (`haldet.stages.plan`) derives which stages a set of signals needs and in which order."""

    name: ClassVar[str] = ""
    # the signals this stage's records hold (read back by `haldet.stages.loader.EvidenceLoader`)
    provides: ClassVar[frozenset[Signal]] = frozenset()
    # stages this one runs after when both are planned (those it reads, and those a run reports first)
    after: ClassVar[tuple[str, ...]] = ()
    # array signal -> (array name in this stage's HDF5 shards, record group that must be valid; "" = none)
    arrays: ClassVar[dict[Signal, tuple[str, str]]] = {}

    def __init__(self, ctx: CellContext) -> None:
        self.ctx = ctx
        self._advance: Callable[[int], None] | None = None  # the progress bar of the batch being computed
        self._left = 0  # items of that batch not yet shown as done

    def item_done(self, n: int = 1) -> None:
        """`n` items of the batch being computed are finished (a backend's `progress` callback): the progress bar
        moves now, though their records are appended when the whole batch is, so a batch as large as the decoding
        pool does not sit at 0% for minutes."""
        if self._advance is not None and (n := min(n, self._left)) > 0:
            self._left -= n
            self._advance(n)

    def key(self, item: Item) -> str:
        raise NotImplementedError

    def unread_parts(self) -> list[str]:
        """Configured parts of this stage that no selected detector reads, so they are not computed."""
        return []

    def items_per_batch(self) -> int:
        """Items computed (and appended, and advanced on the progress bar) together."""
        return 32

    def pool_rows(self) -> int:
        """Rows the local lean decoder keeps in its pool (`decode_rows`): a decoding stage's batches should hold
        several pools' worth, so the pool stays full. 0 where another backend decodes (it batches by itself, and
        small batches lose little on a resume)."""
        return self.ctx.config.decode_rows if self.ctx.backend.kind == "hf" else 0

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        """Records (without `key`) for a batch of items, each with `id`."""
        raise NotImplementedError

    def _note_failures(self, failed: list[dict[str, Any]], keys: dict[str, str]) -> None:
        """Items whose evidence could not be obtained (a remote backend's calls all failed): no record is stored
        (a rerun retries them); they are listed in `<stage>.failed.jsonl` and counted as the stage's `failed`."""
        self.ctx.store.log(f"{self.name}.failed").append(
            [{"id": rec["id"], "key": keys[rec["id"]], "error": rec["failed"]} for rec in failed])
        self.ctx.counts.stage(self.name).add_failed(len(failed))

    def incomplete(self, items: Sequence[Item], records: Mapping[str, Any]) -> set[str]:
        """The items `records` (this stage's `ensure` result) holds no full record for."""
        return {item.id for item in items if item.id not in records}

    def records(self, items: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """The current-key record of each item that has one."""
        return self.ctx.store.log(self.name).read({item.id: self.key(item) for item in items})

    def used_keys(self, records: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
        """The key of each item's record in `records` (this stage's `ensure` result): what a run records as used
        (`keys.json`), so readers show these records and no other (a stage with several records per item
        overrides it)."""
        return {item_id: [str(rec["key"])] for item_id, rec in records.items() if rec.get("key") is not None}

    def ensure(self, items: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """Compute what is missing (or lost with a damaged shard), then return every item's record."""
        done = self.records(items)
        if self.invalidate_damaged(done):
            done = self.records(items)
        todo = [item for item in items if item.id not in done]
        counts = self.ctx.counts.stage(self.name)
        counts.computed = 0
        if not todo:
            return done
        if self.ctx.shard_runner is not None and type(self).ensure is Stage.ensure:
            self.ctx.shard_runner(self, todo)  # shards computed by other workers, through the same store
        with self.ctx.store.lock(self.name):
            done = self.records(items)  # another process may have filled some while we waited
            todo = [item for item in items if item.id not in done]
            counts.computed = len(todo)
            if todo:
                self._compute_missing(todo, done)
        return done

    def invalidate_damaged(self, records: dict[str, dict[str, Any]]) -> int:
        """Drop the records (of any key) whose HDF5 shard is damaged and move the shard aside, so the items are
        recomputed; returns how many current records were lost. Reports each shard through `locking.notify`."""
        by_shard: dict[str, dict[str, list[str]]] = {}
        for rec in records.values():
            if rec.get("shard"):
                names = list(rec["arrays"]) if "arrays" in rec else ["sample_hidden"]
                by_shard.setdefault(rec["shard"], {})[rec["id"]] = names
        if not by_shard:
            return 0
        arrays = self.ctx.store.arrays(self.name)
        damaged = {shard: why for shard, expected in by_shard.items() if (why := arrays.check(shard, expected))}
        if not damaged:
            return 0
        with self.ctx.store.lock(self.name):
            self.ctx.store.log(self.name).drop(lambda rec: rec.get("shard") in damaged)
            for shard, why in damaged.items():
                moved = arrays.quarantine(shard)
                locking.notify(f"{self.name} [{self.ctx.dataset} | {self.ctx.model}]: shard {arrays.root / shard} "
                               f"is damaged ({why}); its {len(by_shard[shard])} item(s) are recomputed now"
                               + (f" (damaged file kept as {moved.name})" if moved else ""))
        lost = sum(len(by_shard[s]) for s in damaged)
        self.ctx.counts.stage(self.name).add_damaged(lost)
        return lost

    def compute_shard(self, items: Sequence[Item]) -> tuple[int, int]:
        """Compute the items of one shard that lack a current record, while other shards of the same stage run in
        other processes: the lock is held only around each append (and the missing items are re-read under it), so
        shards run in parallel and a retried shard never writes an item twice. Returns (computed, failed)."""
        done = self.records(items)
        todo = [item for item in items if item.id not in done]
        counts = self.ctx.counts.stage(self.name)
        before = counts.failed or 0
        self._compute_missing(todo, done, lock_appends=True)
        return len(todo), (counts.failed or 0) - before

    def _compute_missing(self, todo: list[Item], done: dict[str, dict[str, Any]], *,
                         lock_appends: bool = False) -> None:
        if todo:
            start = time.perf_counter()
            advance = self.ctx.progress(f"{self.name} [{self.ctx.dataset} | {self.ctx.model}]", len(todo))
            mark_stored(advance, 0)  # items count as kept only once their batch is appended
            log = self.ctx.store.log(self.name)
            step = max(1, self.items_per_batch())
            for i in range(0, len(todo), step):
                batch = todo[i : i + step]
                keys = {item.id: self.key(item) for item in batch}
                self._advance, self._left = advance, len(batch)
                try:
                    recs = self.compute(batch)
                finally:
                    self._advance = None
                failed = [rec for rec in recs if rec.get("failed")]
                recs = [rec for rec in recs if not rec.get("failed")]
                for rec in recs:
                    rec.setdefault("key", keys[rec["id"]])  # a stage with several keys per item sets its own
                    done[rec["id"]] = rec
                with self.ctx.store.lock(self.name) if lock_appends else nullcontext():
                    if lock_appends:  # another writer may have stored some meanwhile: never twice
                        stored = self.records(batch)
                        recs = [rec for rec in recs if rec["id"] not in stored]
                    log.append(recs)
                if failed:
                    self._note_failures(failed, keys)
                mark_stored(advance, len(recs) + len(failed))  # failed ones are listed in <stage>.failed.jsonl
                if self._left:
                    advance(self._left)
            self.ctx.timings[self.name] = self.ctx.timings.get(self.name, 0.0) + time.perf_counter() - start
            release_memory()  # the next stage's peak must not land on top of this one's freed memory


class DecodingReader(Stage):
    """A stage whose records can also be read while the primary answer is decoded (`generate_with_evidence`):
    the generate stage finds the planned ones through the registry, so it never imports them."""

    def reads_in_decoding(self) -> bool:
        """Whether, as configured, this stage's records can be read while the answer is decoded."""
        return True

    def reads(self, request: EvidenceRequest) -> EvidenceRequest:
        """`request` with what this stage reads of each answer while it is decoded."""
        raise NotImplementedError

    def from_decoding(self, batch: list[Item], evidence: list[AnswerEvidence],
                      seconds: float) -> list[dict[str, Any]]:
        """Records from the evidence read while the answers were decoded (`evidence[i]` of `batch[i]`)."""
        raise NotImplementedError

    # whether the records can also come from the one pass that reads a given response (`Backend.read_given`)
    reads_given: ClassVar[bool] = False

    def from_given(self, batch: list[Item], outputs: list[ForwardOutput], seconds: float) -> list[dict[str, Any]]:
        """Records from the pass over the given responses (`outputs[i]` of `batch[i]`; `reads_given` only)."""
        raise NotImplementedError


# Every stage class, registered by its module's decorator (`load_builtins` imports the modules of haldet.stages).
STAGES: Registry[type[Stage]] = Registry("stage", "haldet.stages")
