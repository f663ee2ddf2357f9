"""From stage records to signals: which stage class produces what, running the needed ones, and the loader a
`SignalView` uses to read a signal for a list of item ids (formats: the `Signal` docstring).

Only records whose key matches the current config are read, so a view never sees stale evidence. Arrays are
stored float16 and returned as float32; a missing or invalid value is None (detectors give NaN with a reason).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from haldet.config import digest
from haldet.errors import HaldetError
from haldet.signals import SIGNAL_STAGE, Signal, stages_for
from haldet.stages.base import CellContext, Item, Stage
from haldet.stages.tokens import SIGNAL_ARRAYS, token_value

STAGE_CLASSES = {
    "generate": "haldet.stages.generate:GenerateStage",
    "sample": "haldet.stages.sample:SampleStage",
    "auxiliary": "haldet.stages.auxiliary:AuxiliaryStage",
    "features": "haldet.stages.features:FeatureStage",
    "verdict": "haldet.stages.verdict:VerdictStage",
}
EVIDENCE_STAGES = ("sample", "auxiliary", "features", "verdict")

# signal -> (array name in the stage's HDF5 shards, feature group that must be valid)
ARRAY_SIGNALS: dict[Signal, tuple[str, str]] = {
    Signal.SAMPLE_HIDDEN: ("sample_hidden", ""),
    Signal.HIDDEN_MEAN: ("hidden_mean", "hidden"),
    Signal.HIDDEN_LAST: ("hidden_last", "hidden"),
    Signal.SEP_FEATURES: ("sep", "sep"),
    Signal.CCS_FEATURES: ("ccs", "ccs"),
    Signal.PRISM_FEATURES: ("prism", "prism"),
    Signal.ICR_FEATURES: ("icr", "icr"),
}


def feature_groups_for(signals: Iterable[Signal]) -> set[str]:
    """Feature groups (`features.groups`) that hold these signals."""
    return {ARRAY_SIGNALS[s][1] for s in signals if s in ARRAY_SIGNALS and SIGNAL_STAGE[s] == "features"}


def hidden_poolings_for(signals: Iterable[Signal]) -> set[str]:
    """Poolings of the `hidden` group (`features.pooling`) that these signals read."""
    return {pooling for signal, pooling in ((Signal.HIDDEN_MEAN, "mean"), (Signal.HIDDEN_LAST, "last"))
            if signal in set(signals)}


def stage_class(name: str) -> type[Stage]:
    try:
        module, _, attr = STAGE_CLASSES[name].partition(":")
    except KeyError:
        raise HaldetError(f"unknown stage {name!r}", hint=f"stages: {', '.join(STAGE_CLASSES)}") from None
    cls: type[Stage] = getattr(importlib.import_module(module), attr)
    return cls


def needed_stages(signals: Iterable[Signal]) -> list[str]:
    """Evidence stages (beyond generate) the signals need, in pipeline order."""
    return [s for s in stages_for(frozenset(signals)) if s != "generate"]


def ensure_stages(ctx: CellContext, items: Sequence[Item], stages: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Run each stage for the items that lack its current-key record; returns stage -> records."""
    return {name: stage_class(name)(ctx).ensure(items) for name in stages}


def evidence_key(ctx: CellContext, items: Sequence[Item], stages: Iterable[str]) -> str:
    """One hash over every item's key in every stage a detector reads: score caches follow any change."""
    names = ["generate", *[s for s in stages if s != "generate"]]
    classes = [stage_class(n)(ctx) for n in names]
    return digest(sorted((item.id, [stage.key(item) for stage in classes]) for item in items))


class EvidenceLoader:
    """`SignalLoader` over a cell's stage records (current keys only), read lazily and once per stage."""

    def __init__(self, ctx: CellContext, items: Sequence[Item]) -> None:
        self.ctx = ctx
        self.items = {item.id: item for item in items}
        self._records: dict[str, dict[str, dict[str, Any]]] = {}

    def records(self, stage: str) -> dict[str, dict[str, Any]]:
        if stage not in self._records:
            self._records[stage] = stage_class(stage)(self.ctx).records(list(self.items.values()))
        return self._records[stage]

    def __call__(self, signal: Signal, ids: Sequence[str]) -> list[Any]:
        stage = SIGNAL_STAGE[signal]
        recs = self.records(stage)
        if signal in ARRAY_SIGNALS:
            return self._arrays(stage, signal, ids, recs)
        if signal in SIGNAL_ARRAYS:
            return self._token_arrays(signal, ids, recs)
        out: list[Any] = []
        for item_id in ids:
            rec = recs.get(item_id)
            out.append(None if rec is None else _value(signal, rec))
        return out

    def _token_arrays(self, signal: Signal, ids: Sequence[str], recs: dict[str, dict[str, Any]]) -> list[Any]:
        """Array parts of the generate stage's token pass (`stages/tokens.py`); ints stay int64."""
        name = SIGNAL_ARRAYS[signal]
        refs = [(i, rec["tokens"]["shard"], item_id) for i, item_id in enumerate(ids)
                if (rec := recs.get(item_id)) is not None and (rec.get("tokens") or {}).get("shard")
                and name in rec["tokens"].get("arrays", {}) and not rec["tokens"].get("invalid")]
        out: list[Any] = [None] * len(ids)
        arrays = self.ctx.store.arrays("generate").read_many([(shard, item_id) for _, shard, item_id in refs], name)
        for (i, _, _), arr in zip(refs, arrays, strict=True):
            out[i] = np.asarray(arr, dtype=np.int64 if name == "topk_ids" else np.float32)
        return out

    def _arrays(self, stage: str, signal: Signal, ids: Sequence[str], recs: dict[str, dict[str, Any]]) -> list[Any]:
        name, group = ARRAY_SIGNALS[signal]
        refs: list[tuple[int, str, str]] = []
        for i, item_id in enumerate(ids):
            rec = recs.get(item_id)
            if rec is None or not rec.get("shard") or name not in rec.get("arrays", {name: None}):
                continue
            if group and group in rec.get("invalid", {}):
                continue
            refs.append((i, rec["shard"], item_id))
        out: list[Any] = [None] * len(ids)
        arrays = self.ctx.store.arrays(stage).read_many([(shard, item_id) for _, shard, item_id in refs], name)
        for (i, _, _), arr in zip(refs, arrays, strict=True):
            out[i] = np.asarray(arr, dtype=np.float32)
        return out


def _value(signal: Signal, rec: dict[str, Any]) -> Any:
    if signal is Signal.SAMPLES:
        return list(rec["samples"])
    if signal is Signal.SAMPLE_LOGLIKS:  # None: the backend gave no log-probs for these samples
        return None if rec.get("logliks") is None else np.asarray(rec["logliks"], dtype=np.float64).reshape(-1, 2)
    if signal is Signal.VERBALIZED:
        return rec.get("verbalized")
    if signal is Signal.SELF_EVAL:
        if rec.get("self_eval_text") is None:
            return None
        return {"p_true": rec.get("p_true"), "logp_true": rec.get("logp_true"), "text": rec["self_eval_text"]}
    if signal is Signal.VERDICT:
        return rec.get("asks") or None
    if signal is Signal.TOKEN_ENTROPIES:
        values = rec.get("token_entropies")
        return None if values is None else np.asarray(values, dtype=np.float64)
    if signal is Signal.TOKEN_LOGPROBS:
        values = rec.get("token_logprobs")
        if values is None or (not values and rec.get("n_tokens")):  # a non-empty answer sent without log-probs
            return None
        return np.asarray(values, dtype=np.float64)
    if signal in (Signal.ANSWER_ENTROPIES, Signal.TOKEN_OFFSETS):
        return token_value(signal, rec)
    raise HaldetError(f"signal {signal.value!r} has no reader", hint="report this as a bug")
