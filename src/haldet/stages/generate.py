"""The `generate` stage: the primary greedy answer of each item, with its token ids and log-probabilities."""

from __future__ import annotations

import time
from typing import Any

from haldet.config import stage_key
from haldet.limits import by_limit, max_new_tokens
from haldet.schema import Generation
from haldet.stages.base import Item, Stage


class GenerateStage(Stage):
    name = "generate"

    def key(self, item: Item) -> str:
        return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt,
                         max_new_tokens(self.ctx.config, item.instance))

    def items_per_batch(self) -> int:
        return self.ctx.config.generation.batch_size * 4

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        gen = self.ctx.config.generation
        start = time.perf_counter()
        outputs: list[Any] = [None] * len(batch)
        for limit, positions in by_limit([max_new_tokens(self.ctx.config, item.instance) for item in batch]).items():
            outs = self.ctx.backend.generate([batch[p].prompt for p in positions], max_new_tokens=limit,
                                             batch_size=gen.batch_size)
            for pos, out in zip(positions, outs, strict=True):
                outputs[pos] = out
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        records = []
        for item, out in zip(batch, outputs, strict=True):
            record = Generation(id=item.id, prompt=item.prompt, response=out.text, token_ids=out.token_ids,
                                token_logprobs=out.token_logprobs, finish_reason=out.finish_reason,
                                n_tokens=len(out.token_ids), model=self.ctx.model, seconds=per_item)
            records.append(record.model_dump())
        return records


def attach_generations(items: list[Item], records: dict[str, dict[str, Any]]) -> None:
    for item in items:
        rec = {k: v for k, v in records[item.id].items() if k != "key"}
        item.generation = Generation.model_validate(rec)
