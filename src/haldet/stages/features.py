"""The `features` stage: white-box evidence from one teacher-forced pass over the exact generated answer.

Pass 1 (always): prompt ids (`HFBackend.encode_prompt`, so no double BOS) + the generation's stored `token_ids`
(never re-tokenised). It yields the answer's token log-probs (they must match generation's within float
tolerance; the largest gap is recorded as `logprob_gap`), token entropies, hidden states of the configured layers
pooled over the answer (group `hidden`: mean and/or last answer token), SEP states (token before generation and
second-to-last answer token) and ICR features (attentions are captured only when `icr` is selected).
Pass 2 (only if `ccs` or `prism` is selected): the statements those groups need, all items' statements batched
together in one pass: CCS "the answer is correct" / negated, PRISM a prompt-guided statement; the last token's
state of every configured layer.

A sequence longer than the model window is not truncated silently: the prompt head is dropped (answer kept) and
the record says so in `window`; if the answer alone does not fit, the groups are marked invalid with the reason.

Record: {id, key, shard, arrays: {name: shape}, layers, n_prompt_tokens, n_answer_tokens, token_logprobs,
token_entropies, logprob_gap, window: {pass: info}, invalid: {group: reason}, seconds}.
Arrays (`features/<shard>.h5`, float16 by default): hidden_mean, hidden_last [n_layers, D]; sep [2, n_layers, D];
ccs [2, n_layers, D]; prism [n_layers, D]; icr [L, F] (`ICR_COLUMNS`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from haldet.backends.base import ForwardOutput, ForwardRequest
from haldet.config import stage_key
from haldet.prompts import user_message
from haldet.stages.base import Item, Stage
from haldet.stages.generate import GenerateStage

STATEMENT_VERSION = "stmt-v1"  # bump when the statement wording changes: it is part of the cache key

CCS_TEMPLATE = "Question: {task}\nAnswer: {answer}\nThe answer above is {verdict}."
PRISM_TEMPLATE = ("Read the question and the answer, then judge whether the answer states anything false.\n"
                  "Question: {task}\nAnswer: {answer}\nDoes this answer contain false information?")


def statements(task: str, answer: str) -> dict[str, str]:
    """The texts of the statement groups for one item (CCS positive/negated, PRISM prompt-guided)."""
    return {"ccs_pos": CCS_TEMPLATE.format(task=task, answer=answer, verdict="correct"),
            "ccs_neg": CCS_TEMPLATE.format(task=task, answer=answer, verdict="incorrect"),
            "prism": PRISM_TEMPLATE.format(task=task, answer=answer)}


class FeatureStage(Stage):
    name = "features"

    def key(self, item: Item) -> str:
        cfg = self.ctx.config.features
        gen_key = GenerateStage(self.ctx).key(item)
        return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt, gen_key, cfg.layers,
                         sorted(cfg.pooling), cfg.dtype, sorted(cfg.groups), STATEMENT_VERSION)

    def items_per_batch(self) -> int:
        return self.ctx.config.features.batch_size * 4

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        cfg = self.ctx.config.features
        backend = self.ctx.backend
        groups: set[str] = set(cfg.groups)
        layers = None if cfg.layers == "all" else list(cfg.layers)
        start = time.perf_counter()
        records: dict[str, dict[str, Any]] = {}
        arrays: dict[str, dict[str, np.ndarray]] = {}
        main: list[ForwardRequest] = []
        for item in batch:
            gen = item.generation
            if gen is None:
                raise ValueError(f"features stage needs the generation of {item.id}")
            prompt_ids = backend.encode_prompt(item.prompt)
            records[item.id] = {"id": item.id, "n_prompt_tokens": len(prompt_ids),
                                "n_answer_tokens": len(gen.token_ids),
                                "token_logprobs": None, "token_entropies": None, "logprob_gap": None,
                                "window": {}, "invalid": {}, "arrays": {}}
            arrays[item.id] = {}
            if gen.token_ids:
                main.append(ForwardRequest(ids=prompt_ids + list(gen.token_ids), start=len(prompt_ids), key=item.id))
            else:
                for group in groups & {"hidden", "sep", "icr"}:
                    records[item.id]["invalid"][group] = "empty answer: no answer tokens to read"
        poolings = ([p for p in cfg.pooling] if "hidden" in groups else []) + (["tbg", "slt"] if "sep" in groups
                                                                               else [])
        outs = backend.forward(main, layers=layers, poolings=sorted(set(poolings)), logprobs=True,
                               icr="icr" in groups, batch_size=cfg.batch_size)
        for out in outs:
            self._main_result(records[out.key], arrays[out.key], out, groups, cfg.pooling,
                              next(i for i in batch if i.id == out.key))
        if groups & {"ccs", "prism"}:
            self._statements(batch, records, arrays, groups, layers)
        shard = None
        if any(arrays.values()):
            shard = self.ctx.store.arrays(self.name).write({i: a for i, a in arrays.items() if a}, dtype=cfg.dtype)
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        n_states = backend.layer_count() + 1 if hasattr(backend, "layer_count") else None
        chosen: list[int] | None = layers
        if n_states:
            chosen = list(range(n_states)) if layers is None else [x + n_states if x < 0 else x for x in layers]
        out_records = []
        for item in batch:
            rec = records[item.id]
            rec["arrays"] = {name: list(arr.shape) for name, arr in arrays[item.id].items()}
            rec.update(shard=shard if arrays[item.id] else None, layers=chosen, seconds=per_item)
            out_records.append(rec)
        return out_records

    def _main_result(self, rec: dict[str, Any], arr: dict[str, np.ndarray], out: ForwardOutput, groups: set[str],
                     pooling: Sequence[str], item: Item) -> None:
        if out.window is not None:
            rec["window"]["answer"] = out.window
        if out.token_logprobs is None:  # skipped: the answer alone exceeds the window
            reason = (out.window or {}).get("reason", "no forward pass")
            for group in groups & {"hidden", "sep", "icr"}:
                rec["invalid"][group] = reason
            return
        rec["token_logprobs"] = [float(x) for x in out.token_logprobs]
        rec["token_entropies"] = [float(x) for x in out.token_entropies] if out.token_entropies is not None else None
        gen_lps = np.asarray(item.generation.token_logprobs if item.generation else [], dtype=np.float64)
        if len(gen_lps) == len(out.token_logprobs) and len(gen_lps):
            rec["logprob_gap"] = float(np.max(np.abs(gen_lps - out.token_logprobs)))
        if "hidden" in groups:
            if "mean" in pooling:
                arr["hidden_mean"] = out.pooled["mean"]
            if "last" in pooling:
                arr["hidden_last"] = out.pooled["last"]
        if "sep" in groups:
            arr["sep"] = np.stack([out.pooled["tbg"], out.pooled["slt"]])
        if "icr" in groups and out.icr is not None:
            arr["icr"] = out.icr

    def _statements(self, batch: list[Item], records: dict[str, dict[str, Any]],
                    arrays: dict[str, dict[str, np.ndarray]], groups: set[str], layers: list[int] | None) -> None:
        """All statement texts of the batch in one teacher-forced pass (last-token states)."""
        backend = self.ctx.backend
        cfg = self.ctx.config.features
        wanted = (["ccs_pos", "ccs_neg"] if "ccs" in groups else []) + (["prism"] if "prism" in groups else [])
        requests = []
        for item in batch:
            texts = statements(user_message(item.instance), item.generation.response if item.generation else "")
            for name in wanted:
                ids = backend.encode_prompt(texts[name])
                requests.append(ForwardRequest(ids=ids, start=len(ids) - 1, key=f"{item.id}\x00{name}"))
        outs = {o.key: o for o in backend.forward(requests, layers=layers, poolings=["last"], logprobs=False,
                                                  icr=False, batch_size=cfg.batch_size)}
        for item in batch:
            got: dict[str, np.ndarray] = {}
            for name in wanted:
                out = outs[f"{item.id}\x00{name}"]
                if out.window is not None:
                    records[item.id]["window"][name] = out.window
                if "last" in out.pooled:
                    got[name] = out.pooled["last"]
            if "ccs" in groups:
                if "ccs_pos" in got and "ccs_neg" in got:
                    arrays[item.id]["ccs"] = np.stack([got["ccs_pos"], got["ccs_neg"]])
                else:
                    records[item.id]["invalid"]["ccs"] = "statement exceeds the model window"
            if "prism" in groups:
                if "prism" in got:
                    arrays[item.id]["prism"] = got["prism"]
                else:
                    records[item.id]["invalid"]["prism"] = "statement exceeds the model window"
