"""The `unconditional` stage: each answer's token log-probabilities WITHOUT its prompt, for the pointwise mutual
information detectors (`pmi`, `cpmi`), from one extra teacher-forced pass over the exact generated token ids.

The answer is read after the model's start token alone (its BOS token; the EOS token for a model without one, as
GPT-2-style models separate documents), so log p(y_t | y_<t) is the language model's own probability of the answer
with no question in front of it. The first token's value depends on that arbitrary start context; the detectors
follow lm-polygraph in leaving it out by default (`skip_first`). Both detectors read this one record, computed once
per item and keyed by the model, the answer (the generate key) and the start ids.

Record: {id, key, lm_logprobs: [T] or null, start_ids, invalid: reason or null, window, seconds}.
"""

from __future__ import annotations

import time
from typing import Any

from haldet.backends.base import TokenRequest
from haldet.config import stage_key
from haldet.signals import Signal
from haldet.stages.base import STAGES, Item, Stage
from haldet.stages.generate import GenerateStage

UNCONDITIONAL_VERSION = "unconditional-v1"  # bump when the record's definition changes: part of the key


@STAGES.register("unconditional")
class UnconditionalStage(Stage):
    provides = frozenset({Signal.ANSWER_LM_LOGPROBS})
    after = ("generate",)

    def key(self, item: Item) -> str:
        return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt, GenerateStage(self.ctx).key(item),
                         self.ctx.backend.start_ids(), UNCONDITIONAL_VERSION)

    def items_per_batch(self) -> int:
        return max(64, self.ctx.config.tokens.batch_size * 4)

    def rows_per_pass(self, requests: list[TokenRequest]) -> int:
        """Answers read together: as many as `tokens.token_budget` tokens hold (short answers after one start token:
        dozens of rows, where `tokens.batch_size` rows of ~30 tokens leave the matrix products small), at least
        `tokens.batch_size`. Rows are sorted by length and right-padded, so this changes values only in float
        rounding (tests/stages/test_graybox_evidence.py)."""
        cfg = self.ctx.config.tokens
        longest = max(len(r.prompt_ids) + len(r.answer_ids) for r in requests)
        return max(1, cfg.batch_size, cfg.token_budget // longest)

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        backend = self.ctx.backend
        head = backend.start_ids()
        records: dict[str, dict[str, Any]] = {}
        requests = []
        for item in batch:
            gen = item.generation
            records[item.id] = {"id": item.id, "lm_logprobs": None, "start_ids": head, "invalid": None,
                                "window": None}
            if gen is None:
                records[item.id]["invalid"] = "no answer"
            elif not gen.token_ids:
                records[item.id]["lm_logprobs"] = []
            else:
                requests.append(TokenRequest(prompt_ids=head, answer_ids=list(gen.token_ids), key=item.id))
        if requests:
            outs = backend.token_pass(requests, top_k=0, entropies=False, attention=False,
                                      batch_size=self.rows_per_pass(requests), progress=self.item_done)
            for out in outs:
                rec = records[out.key]
                rec["window"] = out.window
                if out.token_logprobs is None:
                    rec["invalid"] = (out.window or {}).get("reason", "the pass gave no output")
                else:
                    rec["lm_logprobs"] = [float(x) for x in out.token_logprobs]
        seconds = (time.perf_counter() - start) / max(1, len(batch))
        return [{**records[item.id], "seconds": seconds} for item in batch]
