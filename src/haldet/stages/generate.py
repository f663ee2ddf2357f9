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
            if out.error:
                records.append({"id": item.id, "failed": out.error})
                continue
            record = Generation(id=item.id, prompt=item.prompt, response=out.text, token_ids=out.token_ids,
                                token_logprobs=out.token_logprobs, finish_reason=out.finish_reason,
                                n_tokens=out.n_tokens or 0, model=self.ctx.model, seconds=per_item,
                                token_text=(out.extra.get("tokens") or []) if "tokens" in out.extra else None)
            records.append({**record.model_dump(), **remote_usage([out])})
        return records


def remote_usage(outs: list[Any]) -> dict[str, Any]:
    """Tokens billed and cost of a remote backend's outputs for one record ({} for local backends)."""
    if not outs or "prompt_tokens" not in outs[0].extra:
        return {}
    costs = [o.extra.get("cost_usd") for o in outs]
    return {"api_prompt_tokens": sum(o.extra["prompt_tokens"] for o in outs),
            "api_completion_tokens": sum(o.extra["completion_tokens"] for o in outs),
            "cost_usd": None if any(c is None for c in costs) else sum(costs)}


def generation_of(record: dict[str, Any]) -> Generation:
    """The `Generation` in a generate record (its cache key and billing fields dropped)."""
    return Generation.model_validate({k: v for k, v in record.items() if k in Generation.model_fields})


def attach_generations(items: list[Item], records: dict[str, dict[str, Any]]) -> None:
    for item in items:
        item.generation = generation_of(records[item.id])
