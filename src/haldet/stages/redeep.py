"""The `redeep` stage: ReDeEP's mechanistic evidence per answer (`haldet.backends.hf.redeep`), one eager-attention
pass over the prompt and the answer's exact token ids, only when a selected detector reads `redeep_features`.

An item the pass cannot hold (longer than `redeep.max_tokens`: every layer's attention is kept), whose context is
not in its rendered prompt, or which the suite marked unscorable gets a record with the reason instead of the
scores, so the detector gives NaN with that reason and the coverage shows it.

Record: {id, key, scores: [[L rows of H external-context scores + 1 parametric-knowledge score]] or null,
invalid: reason or null, n_tokens, seconds}.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from haldet.config import stage_key
from haldet.signals import Signal
from haldet.stages.base import STAGES, Item, Stage
from haldet.stages.generate import GenerateStage

REDEEP_VERSION = "redeep-token-v1"  # bump when the scores' definition changes: part of the key


@STAGES.register("redeep")
class RedeepStage(Stage):
    provides = frozenset({Signal.REDEEP_FEATURES})
    after = ("generate", "features")  # reads generate's answers; after features only to keep the log order

    def key(self, item: Item) -> str:
        cfg = self.ctx.config.redeep
        return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt, GenerateStage(self.ctx).key(item),
                         item.instance.context, cfg.top_ratio, cfg.max_tokens, REDEEP_VERSION)

    def items_per_batch(self) -> int:
        return 4  # one long pass each: append often

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        cfg = self.ctx.config.redeep
        out = []
        for item in batch:
            start = time.perf_counter()
            gen = item.generation
            reason = item.instance.meta.get("unscorable")
            value: Any = reason or ("no answer" if gen is None or not gen.token_ids else None)
            if value is None and gen is not None and gen.reasoning_ids:  # never read without its reasoning
                value = ("ReDeEP reads prompt + answer in one pass; an answer after a reasoning block is not "
                         "supported yet")
            if value is None and gen is not None:
                value = self.ctx.backend.redeep_features(item.prompt, list(gen.token_ids), item.instance.context,
                                                         top_ratio=cfg.top_ratio, max_tokens=cfg.max_tokens)
            scores = None if isinstance(value, str) else np.asarray(value, dtype=np.float32)
            out.append({"id": item.id, "scores": None if scores is None else scores.round(6).tolist(),
                        "invalid": value if isinstance(value, str) else None,
                        "n_tokens": len(gen.token_ids) if gen is not None else 0,
                        "seconds": time.perf_counter() - start})
            self.item_done()
        return out
