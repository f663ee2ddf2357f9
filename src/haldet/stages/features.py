"""The `features` stage: white-box evidence from one teacher-forced pass over the exact generated answer.

One pass per item: prompt ids (`HFBackend.encode_prompt`, so no double BOS) + the generation's stored
`token_ids` (never re-tokenised). It yields the answer's token log-probs (they must match generation's within
float tolerance; the largest gap is recorded as `logprob_gap`), token entropies, hidden states of the configured
layers pooled over the answer (group `hidden`: mean and/or last answer token), SEP states (token before
generation and second-to-last answer token) and ICR features (attentions are captured only when `icr` is
computed). The statement groups read the model's state after a short statement appended to the answered
conversation (CCS: "the answer above is correct" / "... incorrect"; PRISM: a question guiding the model to judge
the answer's truthfulness), at the statement's last token. The statements are branches of the same pass (see
`ForwardRequest.branches`): they reuse the states of prompt + answer and cost only their own few tokens.

Only the groups the selected detectors read are computed (`FeatureStage.groups`); the record key names them.

When the local lean decoder generates the answers, the same evidence is read from the decoding itself (states of
the prompt and answer tokens as they were computed, statements as branches of each answer's own cache:
`haldet.backends.hf.answer_reader`) and the generate stage stores these records (`source: "decoding"`; they equal
the pass's within float tolerance, tests/backends/test_answer_reader.py); otherwise this stage's pass runs
(`source: "forward"`). A response that ships with the data is read once: the generate stage's pass over it also
pools these states (`Backend.read_given`, batched by `tokens.token_budget`) and stores the records
(`source: "given"`); only ICR features and the statement groups still need this stage's own pass.

A sequence longer than the model window is not truncated silently: the prompt head is dropped (answer kept) and
the record says so in `window`; if the answer alone does not fit, the groups are marked invalid with the reason.

Record: {id, key, shard, arrays: {name: shape}, layers, groups, n_prompt_tokens, n_answer_tokens, token_logprobs,
token_entropies, token_chernoff, logprob_gap, window: {pass: info}, invalid: {group: reason}, source, seconds}.
Arrays (`features/<shard>.h5`, float16 by default): hidden_mean, hidden_last, hidden_first_n, hidden_last_n
[n_layers, D] (the last two: mean over the first / last `features.select_tokens` answer tokens); sep [2, n_layers, D];
ccs [2, n_layers, D]; prism [n_layers, D]; icr [L, F] (`ICR_COLUMNS`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from haldet.backends.base import AnswerEvidence, Capability, EvidenceRequest, ForwardOutput, ForwardRequest
from haldet.config import stage_key
from haldet.errors import HaldetError
from haldet.signals import Signal
from haldet.stages.base import STAGES, DecodingReader, Item
from haldet.stages.generate import GenerateStage

STATEMENT_VERSION = "stmt-v2"  # bump when the statement wording changes: it is part of the cache key
CHERNOFF_VERSION = "chernoff-v2"  # in the key when a selected detector reads TOKEN_CHERNOFF

# statement branch -> text appended after the answer (tokenised on its own, no special tokens)
STATEMENTS = {
    "ccs_pos": "\n\nThe answer above is correct.",
    "ccs_neg": "\n\nThe answer above is incorrect.",
    "prism": "\n\nJudge the answer above: does it state anything false? Verdict:",
}
GROUP_STATEMENTS = {"ccs": ("ccs_pos", "ccs_neg"), "prism": ("prism",)}
ANSWER_GROUPS = {"hidden", "sep", "icr"}  # groups read from the answer span itself


@STAGES.register("features")
class FeatureStage(DecodingReader):
    provides = frozenset({Signal.TOKEN_ENTROPIES, Signal.TOKEN_CHERNOFF, Signal.HIDDEN_MEAN, Signal.HIDDEN_LAST,
                          Signal.HIDDEN_FIRST_N, Signal.HIDDEN_LAST_N, Signal.SEP_FEATURES, Signal.CCS_FEATURES,
                          Signal.PRISM_FEATURES, Signal.ICR_FEATURES})
    after = ("generate", "sample", "auxiliary")
    # each array signal's group (`features.groups`): an invalid group's arrays are not read
    arrays: ClassVar[dict[Signal, tuple[str, str]]] = {
        Signal.HIDDEN_MEAN: ("hidden_mean", "hidden"),
        Signal.HIDDEN_LAST: ("hidden_last", "hidden"),
        Signal.HIDDEN_FIRST_N: ("hidden_first_n", "hidden"),
        Signal.HIDDEN_LAST_N: ("hidden_last_n", "hidden"),
        Signal.SEP_FEATURES: ("sep", "sep"),
        Signal.CCS_FEATURES: ("ccs", "ccs"),
        Signal.PRISM_FEATURES: ("prism", "prism"),
        Signal.ICR_FEATURES: ("icr", "icr"),
    }

    def groups(self) -> list[str]:
        """Configured groups that the selected detectors read (all configured ones when no selection is known)."""
        return self._read(self.ctx.config.features.groups, feature_groups_for)

    def poolings(self) -> list[str]:
        """Configured poolings of the `hidden` group that the selected detectors read."""
        return self._read(self.ctx.config.features.pooling, hidden_poolings_for)

    def pass_pooling(self, name: str) -> str:
        """The backend's name of a `features.pooling` entry: first_n / last_n -> "first:N" / "last:N"."""
        n = self.ctx.config.features.select_tokens
        return {"first_n": f"first:{n}", "last_n": f"last:{n}"}.get(name, name)

    def _read(self, configured: Sequence[str], read_by: Callable[[frozenset[Signal]], set[str]]) -> list[str]:
        if self.ctx.signals is None:
            return sorted(configured)
        return sorted(set(configured) & read_by(self.ctx.signals))

    def unread_parts(self) -> list[str]:
        cfg = self.ctx.config.features
        groups = self.groups()
        unread = [f"group {g}" for g in cfg.groups if g not in groups]
        if "hidden" in groups:
            unread += [f"pooling {p}" for p in cfg.pooling if p not in self.poolings()]
        return unread

    def key(self, item: Item) -> str:
        cfg = self.ctx.config.features
        gen_key = GenerateStage(self.ctx).key(item)
        groups = self.groups()
        poolings = [self.pass_pooling(p) for p in self.poolings()] if "hidden" in groups else []
        parts = [cfg.layers, poolings, cfg.dtype, groups, STATEMENT_VERSION]
        if self.ctx.signals is None or Signal.TOKEN_CHERNOFF in self.ctx.signals:
            parts.append(CHERNOFF_VERSION)  # v1 records lack the coefficients or (v2) the KL columns
        return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt, gen_key, *parts)

    def items_per_batch(self) -> int:
        return self.ctx.config.features.batch_size * 4

    def _statements(self) -> dict[str, list[int]]:
        backend, groups = self.ctx.backend, set(self.groups())
        return {name: backend.encode_text(STATEMENTS[name])
                for group in sorted(groups & set(GROUP_STATEMENTS)) for name in GROUP_STATEMENTS[group]}

    def _pass_poolings(self) -> list[str]:
        groups = set(self.groups())
        hidden = [self.pass_pooling(p) for p in self.poolings()] if "hidden" in groups else []
        return sorted(set(hidden + (["tbg", "slt"] if "sep" in groups else [])))

    def reads(self, request: EvidenceRequest) -> EvidenceRequest:
        """`request` with what this stage reads of each answer while it is decoded (`generate_with_evidence`)."""
        cfg, groups = self.ctx.config.features, set(self.groups())
        n_states = self.ctx.backend.layer_count() + 1
        layers = list(range(n_states)) if cfg.layers == "all" else [x + n_states if x < 0 else x for x in cfg.layers]
        if any(not 0 <= x < n_states for x in layers):
            raise HaldetError(f"features.layers {cfg.layers} is out of range for a model with {n_states} "
                              "hidden-state layers", where="features.layers")
        return replace(request, layers=layers, poolings=self._pass_poolings(), icr="icr" in groups,
                       statements=self._statements())

    def from_decoding(self, batch: list[Item], evidence: list[AnswerEvidence],
                      seconds: float) -> list[dict[str, Any]]:
        """Records from the evidence read while the answers were decoded (`evidence[i]` of `batch[i]`)."""
        outs = [replace(ev.output, key=item.id) for item, ev in zip(batch, evidence, strict=True)]
        records = self._records(batch, outs, "decoding", seconds)
        for rec in records:  # the log-probs are the generation's own: there is no second computation to compare
            rec["logprob_gap"] = None
        return records

    reads_given = True

    def from_given(self, batch: list[Item], outputs: list[ForwardOutput], seconds: float) -> list[dict[str, Any]]:
        """Records from the generate stage's one pass over given responses (`source: "given"`): the log-probs are
        the generation's own, so there is no gap to measure."""
        records = self._records(batch, outputs, "given", seconds)
        for rec in records:
            rec["logprob_gap"] = None
        return records

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        cfg = self.ctx.config.features
        backend = self.ctx.backend
        groups = set(self.groups())
        layers = None if cfg.layers == "all" else list(cfg.layers)
        suffixes = self._statements()
        start = time.perf_counter()
        # a reasoning model's answer is read after its reasoning, as it was generated: the evidence is the answer's
        prompts = [backend.encode_prompt(item.prompt) + list(_generation(item).reasoning_ids) for item in batch]
        requests = [ForwardRequest(ids=ids + list(_generation(item).token_ids), start=len(ids), key=item.id,
                                   branches=suffixes) for item, ids in zip(batch, prompts, strict=True)]
        outs = backend.forward(requests, layers=layers, poolings=self._pass_poolings(), logprobs=True,
                               icr="icr" in groups, batch_size=cfg.batch_size)
        return self._records(batch, outs, "forward", (time.perf_counter() - start) / max(1, len(batch)))

    def _records(self, batch: list[Item], outs: list[ForwardOutput], source: str,
                 seconds: float) -> list[dict[str, Any]]:
        """Records and the arrays shard of a batch from its outputs (matched by `key` = item id)."""
        cfg, backend = self.ctx.config.features, self.ctx.backend
        groups = set(self.groups())
        pooling = self.poolings() if "hidden" in groups else []
        layers = None if cfg.layers == "all" else list(cfg.layers)
        records: dict[str, dict[str, Any]] = {}
        arrays: dict[str, dict[str, np.ndarray]] = {}
        for item in batch:
            gen = _generation(item)
            records[item.id] = {"id": item.id, "n_prompt_tokens": len(backend.encode_prompt(item.prompt)),
                                "n_answer_tokens": len(gen.token_ids), "groups": sorted(groups),
                                "token_logprobs": None, "token_entropies": None, "token_chernoff": None,
                                "logprob_gap": None,
                                "window": {}, "invalid": {}, "arrays": {}, "source": source}
            arrays[item.id] = {}
            if not gen.token_ids:
                for group in groups & ANSWER_GROUPS:
                    records[item.id]["invalid"][group] = gen.no_answer or "empty answer: no answer tokens to read"
        by_id = {item.id: item for item in batch}
        for out in outs:
            self._result(records[out.key], arrays[out.key], out, groups, pooling, by_id[out.key])
        shard = None
        if any(arrays.values()):
            shard = self.ctx.store.arrays(self.name).write({i: a for i, a in arrays.items() if a}, dtype=cfg.dtype)
        n_states = backend.layer_count() + 1 if Capability.LAYER_COUNT in backend.capabilities else None
        chosen: list[int] | None = layers
        if n_states:
            chosen = list(range(n_states)) if layers is None else [x + n_states if x < 0 else x for x in layers]
        out_records = []
        for item in batch:
            rec = records[item.id]
            rec["arrays"] = {name: list(arr.shape) for name, arr in arrays[item.id].items()}
            rec.update(shard=shard if arrays[item.id] else None, layers=chosen, seconds=seconds)
            out_records.append(rec)
        return out_records

    def _result(self, rec: dict[str, Any], arr: dict[str, np.ndarray], out: ForwardOutput, groups: set[str],
                pooling: list[str], item: Item) -> None:
        if out.window is not None:
            rec["window"]["answer"] = out.window
        if out.token_logprobs is None and out.window and out.window.get("policy") == "skipped":
            for group in groups:
                rec["invalid"][group] = out.window["reason"]
            return
        if out.token_logprobs is not None:
            rec["token_logprobs"] = [float(x) for x in out.token_logprobs]
            rec["token_entropies"] = ([float(x) for x in out.token_entropies] if out.token_entropies is not None
                                      else None)
            rec["token_chernoff"] = (out.token_chernoff.tolist() if out.token_chernoff is not None else None)
            gen_lps = np.asarray(item.generation.token_logprobs if item.generation else [], dtype=np.float64)
            if len(gen_lps) == len(out.token_logprobs) and len(gen_lps):
                rec["logprob_gap"] = float(np.max(np.abs(gen_lps - out.token_logprobs)))
        for name in pooling:
            if self.pass_pooling(name) in out.pooled:
                arr[f"hidden_{name}"] = out.pooled[self.pass_pooling(name)]
        if "sep" in groups and "tbg" in out.pooled:
            arr["sep"] = np.stack([out.pooled["tbg"], out.pooled["slt"]])
        if "icr" in groups and out.icr is not None:
            arr["icr"] = out.icr
        for group in sorted(groups & set(GROUP_STATEMENTS)):
            names = GROUP_STATEMENTS[group]
            if not all(name in out.branch_states for name in names):
                rec["invalid"][group] = "the statement does not fit in the model window"
            elif len(names) == 1:
                arr[group] = out.branch_states[names[0]]
            else:  # ccs: [2, layers, D], positive then negated
                arr[group] = np.stack([out.branch_states[name] for name in names])


def feature_groups_for(signals: Iterable[Signal]) -> set[str]:
    """Feature groups (`features.groups`) that hold these signals."""
    return {FeatureStage.arrays[s][1] for s in signals if s in FeatureStage.arrays}


def hidden_poolings_for(signals: Iterable[Signal]) -> set[str]:
    """Poolings of the `hidden` group (`features.pooling`) that these signals read."""
    pairs = ((Signal.HIDDEN_MEAN, "mean"), (Signal.HIDDEN_LAST, "last"), (Signal.HIDDEN_FIRST_N, "first_n"),
             (Signal.HIDDEN_LAST_N, "last_n"))
    return {pooling for signal, pooling in pairs if signal in set(signals)}


def _generation(item: Item) -> Any:
    if item.generation is None:
        raise ValueError(f"features stage needs the generation of {item.id}")
    return item.generation
