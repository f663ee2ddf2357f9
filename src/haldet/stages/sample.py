"""The `sample` stage: K stochastic answers per item from the stored prompt (paper 4.1 and appendix E.1).

All K answers of a prompt come from one batched `generate` call (`num_return_sequences`); each sample row has its
own seed derived from (sample.seed, item id, sample index), so an item's samples are identical whichever batch it
lands in, including after a resume. Each sample keeps its token ids, its sequence log-likelihood under the model
(sum of token log-probs at temperature 1, and the token count), and, when `sample.hidden_layer` is set, the pooled
hidden state of that layer from a teacher-forced pass over the exact sample ids (EigenScore reads it).

Record: {id, key, samples: [K texts], token_ids: [K lists], logliks: [[sum, n], ...], finish: [K],
sanitised_logits, hidden_layer, hidden_pooling, shard (or null), seconds}.
Arrays (`sample/<shard>.h5`): `/<id>/sample_hidden` [K, D] (NaN row for an empty sample).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from haldet.backends.base import ForwardRequest
from haldet.config import digest, stage_key
from haldet.stages.base import Item, Stage


def item_seed(seed: int, item_id: str) -> int:
    """Base seed of one item's samples: stable across runs, independent of batch composition."""
    return int(digest([seed, item_id], length=15), 16)


class SampleStage(Stage):
    name = "sample"

    def key(self, item: Item) -> str:
        cfg = self.ctx.config.sample
        return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt, cfg.k, cfg.temperature, cfg.top_p,
                         cfg.seed, cfg.max_new_tokens, cfg.hidden_layer,
                         cfg.hidden_pooling if cfg.hidden_layer is not None else None)

    def items_per_batch(self) -> int:
        cfg = self.ctx.config.sample
        return max(1, cfg.batch_size // cfg.k) * 2

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        cfg = self.ctx.config.sample
        backend = self.ctx.backend
        start = time.perf_counter()
        outputs = backend.sample([item.prompt for item in batch], k=cfg.k, temperature=cfg.temperature,
                                 top_p=cfg.top_p, seeds=[item_seed(cfg.seed, item.id) for item in batch],
                                 max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size)
        hidden: dict[str, np.ndarray] = {}
        if cfg.hidden_layer is not None:
            hidden = self._hidden(batch, outputs)
        shard = (self.ctx.store.arrays(self.name).write({i: {"sample_hidden": h} for i, h in hidden.items()})
                 if hidden else None)
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        records = []
        for item, outs in zip(batch, outputs, strict=True):
            records.append({
                "id": item.id,
                "samples": [o.text for o in outs],
                "token_ids": [o.token_ids for o in outs],
                "logliks": [[float(np.sum(o.token_logprobs)), len(o.token_ids)] for o in outs],
                "finish": [o.finish_reason for o in outs],
                "sanitised_logits": int(sum(o.extra.get("sanitised_logits", 0) for o in outs)),
                "hidden_layer": cfg.hidden_layer,
                "hidden_pooling": cfg.hidden_pooling if cfg.hidden_layer is not None else None,
                "shard": shard if item.id in hidden else None,
                "seconds": per_item,
            })
        return records

    def _hidden(self, batch: list[Item], outputs: list[list[Any]]) -> dict[str, np.ndarray]:
        """[K, D] pooled state of the configured layer per item; NaN rows for empty samples."""
        cfg = self.ctx.config.sample
        backend = self.ctx.backend
        requests = []
        for item, outs in zip(batch, outputs, strict=True):
            prompt_ids = backend.encode_prompt(item.prompt)
            for j, o in enumerate(outs):
                if o.token_ids:
                    requests.append(ForwardRequest(ids=prompt_ids + o.token_ids, start=len(prompt_ids),
                                                   key=f"{item.id}\x00{j}"))
        layer = cfg.hidden_layer if cfg.hidden_layer is not None else -1
        results = backend.forward(requests, layers=[layer], poolings=[cfg.hidden_pooling],
                                  logprobs=False, icr=False, batch_size=self.ctx.config.features.batch_size)
        by_key = {r.key: r.pooled[cfg.hidden_pooling][0] for r in results if cfg.hidden_pooling in r.pooled}
        dim = next(iter(by_key.values())).shape[-1] if by_key else 0
        out: dict[str, np.ndarray] = {}
        for item, outs in zip(batch, outputs, strict=True):
            rows = [by_key.get(f"{item.id}\x00{j}", np.full(dim, np.nan, dtype=np.float32)) for j in range(len(outs))]
            if dim:
                out[item.id] = np.stack(rows)
        return out
