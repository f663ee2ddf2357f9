"""From stage records to signals: running the planned stages (and recording which records the run used), and the
loader a `SignalView` uses to read a signal for a list of item ids (formats: the `Signal` docstring). Which stage
holds a signal, and under which array name, is what the stage classes declare (`provides`, `arrays`;
`haldet.stages.plan`).

Only records whose key matches the current config are read, so a view never sees stale evidence. Arrays are
stored float16 and returned as float32; a missing or invalid value is None (detectors give NaN with a reason).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from haldet.config import digest
from haldet.errors import HaldetError
from haldet.signals import SampleTexts, Signal
from haldet.stages.base import CellContext, Item
from haldet.stages.plan import PRIMARY, plan, providers, stage_class
from haldet.stages.tokens import SIGNAL_ARRAYS, token_value


def needed_stages(signals: Iterable[Signal]) -> list[str]:
    """Evidence stages (beyond the primary `generate`) the signals need, in plan order."""
    primary = providers()[PRIMARY].name
    return [cls.name for cls in plan(signals) if cls.name != primary]


def ensure_stages(ctx: CellContext, items: Sequence[Item], stages: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Run each stage for the items that lack its current-key record; returns stage -> records."""
    return {name: stage_class(name)(ctx).ensure(items) for name in stages}


def record_used(ctx: CellContext, records: Mapping[str, Mapping[str, Any]], *, add: bool = False) -> None:
    """Record in the cell's `keys.json` the key of every record the run used (stage -> its `ensure` result), so
    readers of the run show those records and no other record a log holds for the same item (`add`: with what this
    run recorded before, e.g. the verdicts of an earlier training-label set)."""
    ctx.store.record_stage_keys({name: stage_class(name)(ctx).used_keys(recs) for name, recs in records.items()},
                                add=add)


def evidence_gaps(ctx: CellContext, items: Sequence[Item], records: Mapping[str, Mapping[str, Any]]
                  ) -> dict[str, list[str]]:
    """Per stage, the items it holds no full record for (a call that failed after its retries): part of the evidence
    key, so scores computed while evidence was missing are not reused once a later run has it."""
    gaps = {name: sorted(stage_class(name)(ctx).incomplete(items, recs)) for name, recs in records.items()}
    return {name: ids for name, ids in gaps.items() if ids}


def evidence_key(ctx: CellContext, items: Sequence[Item], stages: Iterable[str],
                 gaps: Mapping[str, list[str]] | None = None, *,
                 known: dict[str, dict[str, str]] | None = None) -> str:
    """One hash over every item's key in every stage a detector reads, and the items any of them still lacks
    (`evidence_gaps`): score caches follow any change. Without gaps the key is the keys' hash alone.

    `known` (stage -> item id -> key) keeps the keys computed for one cell's detectors, which read the same stages
    of the same items: each stage key once per item, not once per detector (a key hashes the item's prompt and the
    keys of the stages before it)."""
    primary = providers()[PRIMARY].name
    names = [primary, *[s for s in stages if s != primary]]
    memo = {} if known is None else known
    columns = []
    for name in names:
        stage, done = stage_class(name)(ctx), memo.setdefault(name, {})
        for item in items:
            if item.id not in done:
                done[item.id] = stage.key(item)
        columns.append([done[item.id] for item in items])
    keys = sorted((item.id, [column[i] for column in columns]) for i, item in enumerate(items))
    missing = {name: (gaps or {})[name] for name in names if (gaps or {}).get(name)}
    return digest([keys, missing]) if missing else digest(keys)


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
        cls = providers()[signal]
        recs = self.records(cls.name)
        if signal in cls.arrays:
            return self._arrays(cls.name, cls.arrays[signal], ids, recs)
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

    def _arrays(self, stage: str, array: tuple[str, str], ids: Sequence[str],
                recs: dict[str, dict[str, Any]]) -> list[Any]:
        name, group = array
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
        return SampleTexts(rec["samples"], rec.get("reasoning"))
    if signal is Signal.SAMPLE_LOGLIKS:  # None: the backend gave no log-probs for these samples
        return None if rec.get("logliks") is None else np.asarray(rec["logliks"], dtype=np.float64).reshape(-1, 2)
    if signal is Signal.VERBALIZED:
        return rec.get("verbalized")
    if signal is Signal.SELF_EVAL:
        if rec.get("self_eval_text") is None:
            return None
        return {"p_true": rec.get("p_true"), "logp_true": rec.get("logp_true"), "text": rec["self_eval_text"],
                "procedure": rec.get("procedure", "follow_up"), "decision": rec.get("decision"),
                "logp_decision": rec.get("logp_decision")}
    if signal is Signal.VERDICT:
        return rec.get("asks") or None
    if signal is Signal.CLAIM_P_TRUE:
        return rec.get("units")
    if signal is Signal.TOKEN_ENTROPIES:
        values = rec.get("token_entropies")
        return None if values is None else np.asarray(values, dtype=np.float64)
    if signal is Signal.ANSWER_LM_LOGPROBS:
        values = rec.get("lm_logprobs")
        return None if values is None else np.asarray(values, dtype=np.float64)
    if signal is Signal.TRACE_ANSWER_ENTROPIES:  # a sample without an answer is NaN (null in the record)
        values = rec.get("entropies")
        return None if values is None else np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    if signal is Signal.TOKEN_CHERNOFF:
        values = rec.get("token_chernoff")
        return None if values is None else np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    if signal is Signal.TOKEN_LOGPROBS:
        values = rec.get("token_logprobs")
        if values is None or (not values and rec.get("n_tokens")):  # a non-empty answer sent without log-probs
            return None
        return np.asarray(values, dtype=np.float64)
    if signal is Signal.REDEEP_FEATURES:  # the scores, or the reason the item could not be processed
        return rec.get("invalid") or np.asarray(rec["scores"], dtype=np.float32)
    if signal in (Signal.ANSWER_ENTROPIES, Signal.TOKEN_OFFSETS):
        return token_value(signal, rec)
    raise HaldetError(f"signal {signal.value!r} has no reader", hint="report this as a bug")
