"""The `trace_answer` stage: how uncertain the model is about each sampled answer once it has thought the primary
output's thoughts (RACE's reasoning-answer alignment, `haldet.detectors.race` with `alignment: entropy`).

Each sample's answer (its text, tokenised as a given response is) is teacher-forced after the prompt and the primary
output's reasoning ids (everything the model wrote before its answer, thinking markers included), so the model
reads it exactly where it would write its own answer after that trace; the value per sample is the mean token
entropy (nats) over the answer's positions. The paper does this with a separate proxy LLM reading the extracted
steps ("Thought: ... Answer: ..."); here the target model itself is the proxy and the trace is its own. One
teacher-forced pass per sample, batched; only with a detector that reads TRACE_ANSWER_ENTROPIES.

Record: {id, key, entropies: [K] (null for a sample without an answer), invalid: reason or null, seconds}.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from haldet.backends.base import TokenRequest
from haldet.config import stage_key
from haldet.signals import Signal
from haldet.stages.base import STAGES, Item, Stage
from haldet.stages.generate import GenerateStage
from haldet.stages.sample import SampleStage

TRACE_ANSWER_VERSION = "trace-answer-v1"  # bump when the record's definition changes: part of the key
NO_TRACE = "the primary output has no reasoning trace to read the sampled answers after"


@STAGES.register("trace_answer")
class TraceAnswerStage(Stage):
    provides = frozenset({Signal.TRACE_ANSWER_ENTROPIES})
    after = ("generate", "sample")

    def key(self, item: Item) -> str:
        return stage_key(self.name, self.ctx.backend.fingerprint(), GenerateStage(self.ctx).key(item),
                         SampleStage(self.ctx).key(item), TRACE_ANSWER_VERSION)

    def items_per_batch(self) -> int:
        return max(1, self.ctx.config.tokens.batch_size)

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        start = time.perf_counter()
        backend = self.ctx.backend
        samples = SampleStage(self.ctx).records(batch)
        records: dict[str, dict[str, Any]] = {}
        requests: list[TokenRequest] = []
        for item in batch:
            gen, rec = item.generation, samples.get(item.id)
            records[item.id] = {"id": item.id, "entropies": None, "invalid": None}
            if gen is None or not gen.reasoning_ids:
                records[item.id]["invalid"] = NO_TRACE
            elif rec is None:
                records[item.id]["invalid"] = "no samples"
            else:
                texts = [str(t or "") for t in rec.get("samples") or []]
                records[item.id]["entropies"] = [None] * len(texts)
                context = backend.encode_prompt(item.prompt) + list(gen.reasoning_ids)
                requests += [TokenRequest(prompt_ids=context, answer_ids=ids, key=f"{k}\t{item.id}")
                             for k, text in enumerate(texts) if text.strip()
                             and (ids := backend.encode_response(text.strip())[0])]
        if requests:
            outs = backend.token_pass(requests, top_k=0, entropies=True, attention=False,
                                      batch_size=self.ctx.config.tokens.batch_size)
            for out in outs:
                k, item_id = out.key.split("\t", 1)
                if out.entropies is not None and len(out.entropies):
                    records[item_id]["entropies"][int(k)] = float(np.mean(out.entropies))
        seconds = (time.perf_counter() - start) / max(1, len(batch))
        return [{**records[item.id], "seconds": seconds} for item in batch]
