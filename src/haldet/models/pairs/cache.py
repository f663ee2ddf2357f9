"""`PairCache`: runs a pair model over the pairs of many items at once. It drops duplicates, answers pairs already
computed (in this process or, with a cell directory, in an earlier run: `pairs/<model>.jsonl`), and batches the
rest (length-sorted), so each distinct pair is computed once per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from haldet.models.pairs.base import Pair, PairModel, Progress, pair_id
from haldet.store import StageLog, model_slug

_MEMORY: dict[str, dict[str, np.ndarray]] = {}
PREPARE_BLOCK = 4096  # pairs handed to `PairModel.prepare` at once (bounds what is prepared before it is stored)


class PairCache:
    """Computes pairs once: process memory, then `<cell>/pairs/<model>.jsonl`, then the model (batched). The NaN
    rows of an abstaining model are returned as they are and never kept, so they are asked again next time."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self._read: set[str] = set()

    def _log(self, model: PairModel) -> StageLog | None:
        return None if self.root is None else StageLog(self.root / "pairs" / f"{model_slug(model.id)}.jsonl")

    def scores(self, model: PairModel, pairs: Sequence[Pair], progress: Progress | None = None) -> np.ndarray:
        """[len(pairs), model.width] for the given pairs (duplicates computed once)."""
        memo = _MEMORY.setdefault(model.id, {})
        disk = self._log(model)
        if disk is not None and model.id not in self._read:
            for rec in disk.read(model.id).values():
                memo.setdefault(rec["id"], np.asarray(rec["v"], dtype=np.float64))
            self._read.add(model.id)
        ids = [pair_id(a, b) for a, b in pairs]
        todo: dict[str, Pair] = {}
        abstained: dict[str, np.ndarray] = {}  # NaN rows of an abstaining model (`PairModel.abstains`)
        for pid, pair in zip(ids, pairs, strict=True):
            if pid not in memo:
                todo.setdefault(pid, pair)
        if progress is not None and len(set(ids)) > len(todo):
            progress(len(set(ids)) - len(todo))  # already known: the bar counts distinct pairs
        if todo:
            model.use_cell(self.root)
            order = sorted(todo, key=lambda k: len(todo[k][0]) + len(todo[k][1]))
            step = model.pairs_per_call
            prepared = 0
            for start in range(0, len(order), step):
                if start >= prepared:  # per-text work for the next block of pairs, done once for the block
                    prepared = start + max(PREPARE_BLOCK, step)
                    model.prepare([todo[k] for k in order[start:prepared]])
                chunk = order[start : start + step]
                values = model.compute([todo[k] for k in chunk])
                answered = np.isfinite(values).all(axis=-1) if values.ndim == 2 else np.zeros(0, dtype=bool)
                if values.shape != (len(chunk), model.width) or not (model.abstains or answered.all()):
                    raise RuntimeError(f"{model.id} returned {values.shape} values, some non-finite")
                for k, v, ok in zip(chunk, values, answered, strict=True):
                    (memo if ok else abstained)[k] = v  # an abstention is never kept: asked again next time
                if disk is not None:
                    disk.append({"id": k, "key": model.id, "v": [round(float(x), 7) for x in v]} for k, v, ok in
                                zip(chunk, values, answered, strict=True) if ok)
                if progress is not None:
                    progress(len(chunk))
        if not ids:
            return np.zeros((0, model.width))
        return np.stack([memo[k] if k in memo else abstained[k] for k in ids])
