"""The `sample` stage: K stochastic answers per item from the stored prompt (paper 4.1 and appendix E.1).

All K answers of a prompt come from one batched `generate` call (K rows sharing the prompt's KV cache, computed
once); each sample row has its own seed derived from (sample.seed, item id, sample index), so an item's samples
are identical whichever batch it lands in, including after a resume. Each sample keeps its token ids, its
sequence log-likelihood under the model (sum of token log-probs at temperature 1, and the token count), and, when
`sample.hidden_layer` is set and a selected detector reads it (EigenScore), the pooled hidden state of that layer
over the sample's tokens: pooled by the local lean decoder from its own decoding steps (`hidden_source:
"decoding"`, no extra pass), else from a teacher-forced pass over the exact sample ids (the K samples packed as
branches of one row per item, so the prompt is read once; `hidden_source: "forward"`).

`sample.model` names another model to draw the samples (TRIVIA+ sampled SelfCheck from GPT-4-mini and Claude): its
backend renders the item's messages with its own chat template, its fingerprint keys the records, and each record
names it (`sample_model`).

Record: {id, key, sample_model, samples: [K texts], token_ids: [K lists], logliks: [[sum, n], ...], finish: [K],
sanitised_logits, hidden_layer, hidden_pooling, hidden_source, shard (or null), seconds}.
Arrays (`sample/<shard>.h5`): `/<id>/sample_hidden` [K, D] (NaN row for an empty sample).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np

from haldet.backends.base import Backend, Capability, ForwardRequest
from haldet.config import digest, stage_key
from haldet.signals import Signal
from haldet.stages.base import STAGES, Item, Stage
from haldet.stages.generate import remote_usage
from haldet.util.limits import by_limit, max_new_tokens


def _logliks(outs: list[Any]) -> list[list[float]] | None:
    """(sum of token log-probs, token count) per sample; None when the backend sent no log-probs."""
    if any(o.extra.get("logprobs") is False for o in outs):
        return None
    return [[float(np.sum(o.token_logprobs)), len(o.token_logprobs) if not o.token_ids else len(o.token_ids)]
            for o in outs]


def sample_reasoning(outs: list[Any]) -> dict[str, Any]:
    """A reasoning model's samples: each one's reasoning text and why it has no answer (cut off inside its
    reasoning; its `samples` entry is then empty); {} for other models."""
    if not any("reasoning" in o.extra for o in outs):
        return {}
    return {"reasoning": [o.extra.get("reasoning") for o in outs],
            "no_answer": [o.extra.get("no_answer") for o in outs]}


def _total_tokens(outs: list[Any]) -> int | None:
    counts = [o.n_tokens for o in outs]
    return None if any(c is None for c in counts) else int(sum(counts))


def item_seed(seed: int, item_id: str) -> int:
    """Base seed of one item's samples: stable across runs, independent of batch composition."""
    return int(digest([seed, item_id], length=15), 16)


@STAGES.register("sample")
class SampleStage(Stage):
    provides = frozenset({Signal.SAMPLES, Signal.SAMPLE_LOGLIKS, Signal.SAMPLE_HIDDEN})
    after = ("generate",)
    arrays: ClassVar[dict[Signal, tuple[str, str]]] = {Signal.SAMPLE_HIDDEN: ("sample_hidden", "")}

    @property
    def backend(self) -> Backend:
        """The backend that draws the samples: the cell's, or `sample.model`'s."""
        sampler = self.ctx.sampler
        return self.ctx.backend if sampler is None else sampler.backend()

    def prompt(self, item: Item) -> str:
        sampler = self.ctx.sampler
        return item.prompt if sampler is None else sampler.render(item)

    def sample_model(self) -> str:
        return self.ctx.model if self.ctx.sampler is None else self.ctx.sampler.model

    def hidden_layer(self) -> int | None:
        """The layer whose per-sample state is stored: the configured one, if a selected detector reads it and the
        sampling model has hidden states (an endpoint has none)."""
        wanted = self.ctx.signals is None or Signal.SAMPLE_HIDDEN in self.ctx.signals
        if self.ctx.sampler is not None and Capability.HIDDEN_STATES not in self.backend.capabilities:
            wanted = False
        return self.ctx.config.sample.hidden_layer if wanted else None

    def unread_parts(self) -> list[str]:
        unread = self.ctx.config.sample.hidden_layer is not None and self.hidden_layer() is None
        return ["per-sample hidden state"] if unread else []

    def key(self, item: Item) -> str:
        cfg = self.ctx.config.sample
        layer = self.hidden_layer()
        limit = max_new_tokens(self.ctx.config, item.instance, sample=True)
        backend = self.backend
        return stage_key(self.name, backend.fingerprint(), backend.sampler, self.prompt(item), cfg.k,
                         cfg.temperature, cfg.top_p,
                         cfg.seed, limit, layer, cfg.hidden_pooling if layer is not None else None)

    def items_per_batch(self) -> int:
        cfg = self.ctx.config.sample
        # enough prompts per stored shard for the decoding pool (decode_rows rows) to stay full for a while
        return max(max(1, cfg.batch_size // cfg.k) * 2, 4 * self.pool_rows() // cfg.k)

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        cfg = self.ctx.config.sample
        backend = self.backend
        start = time.perf_counter()
        outputs: list[Any] = [None] * len(batch)
        limits = [max_new_tokens(self.ctx.config, item.instance, sample=True) for item in batch]
        layer = self.hidden_layer()
        for limit, positions in by_limit(limits).items():
            part = [batch[p] for p in positions]
            outs = backend.sample([self.prompt(item) for item in part], k=cfg.k, temperature=cfg.temperature,
                                  top_p=cfg.top_p, seeds=[item_seed(cfg.seed, item.id) for item in part],
                                  max_new_tokens=limit, batch_size=cfg.batch_size, progress=self.item_done,
                                  hidden=(layer, cfg.hidden_pooling) if layer is not None else None)
            for pos, out in zip(positions, outs, strict=True):
                outputs[pos] = out
        hidden: dict[str, np.ndarray] = {}
        hidden_source = None
        if layer is not None:
            thinking = any("reasoning" in o.extra for outs in outputs for o in outs)
            # pooled while decoding (no extra pass), except a reasoning model's samples: their answers' states are
            # read after their reasoning by the pass below
            if not thinking and all("hidden" in o.extra for outs in outputs for o in outs):
                hidden, hidden_source = {item.id: np.stack([o.extra["hidden"] for o in outs]).astype(np.float32)
                                         for item, outs in zip(batch, outputs, strict=True)}, "decoding"
            else:
                hidden, hidden_source = self._hidden(batch, outputs, layer), "forward"
        shard = (self.ctx.store.arrays(self.name).write({i: {"sample_hidden": h} for i, h in hidden.items()})
                 if hidden else None)
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        records: list[dict[str, Any]] = []
        for item, outs in zip(batch, outputs, strict=True):
            errors = [o.error for o in outs if o.error]
            if errors:  # a remote sample never came: no record, the item is retried on the next run
                records.append({"id": item.id, "failed": errors[0]})
                continue
            records.append({
                "id": item.id,
                "sample_model": self.sample_model(),
                "samples": [o.text for o in outs],
                "token_ids": [o.token_ids for o in outs],
                "logliks": _logliks(outs),
                "n_tokens": _total_tokens(outs),
                **remote_usage(outs),
                "finish": [o.finish_reason for o in outs],
                **sample_reasoning(outs),
                "sanitised_logits": int(sum(o.extra.get("sanitised_logits", 0) for o in outs)),
                "hidden_layer": layer,
                "hidden_pooling": cfg.hidden_pooling if layer is not None else None,
                "hidden_source": hidden_source,
                "shard": shard if item.id in hidden else None,
                "seconds": per_item,
            })
        return records

    def _hidden(self, batch: list[Item], outputs: list[list[Any]], layer: int) -> dict[str, np.ndarray]:
        """[K, D] pooled state of the layer per item; NaN rows for empty samples. The K samples are branches of one
        row (prompt + sample 1 + ... + sample K, each sample seeing the prompt and itself): the prompt is read
        once per item, not K times."""
        cfg = self.ctx.config.sample
        backend = self.backend
        requests = []
        for item, outs in zip(batch, outputs, strict=True):
            prompt_ids = backend.encode_prompt(self.prompt(item))
            branches = {str(j): list(o.token_ids) for j, o in enumerate(outs)
                        if o.token_ids and not o.extra.get("reasoning_ids")}
            if branches:
                requests.append(ForwardRequest(ids=prompt_ids, start=len(prompt_ids), key=item.id, branches=branches))
            for j, o in enumerate(outs):  # a sample's answer after its own reasoning: one row of its own
                if o.token_ids and o.extra.get("reasoning_ids"):
                    ids = prompt_ids + list(o.extra["reasoning_ids"])
                    requests.append(ForwardRequest(ids=ids, start=len(ids), key=f"{item.id}\x00{j}",
                                                   branches={str(j): list(o.token_ids)}))
        results = backend.forward(requests, layers=[layer], poolings=[], logprobs=False, icr=False,
                                  batch_size=self.ctx.config.features.batch_size, branch_pooling=cfg.hidden_pooling)
        states: dict[str, dict[str, Any]] = {}
        for r in results:
            states.setdefault(r.key.split("\x00")[0], {}).update(r.branch_states)
        dim = next((v.shape[-1] for st in states.values() for v in st.values()), 0)
        out: dict[str, np.ndarray] = {}
        for item, outs in zip(batch, outputs, strict=True):
            got = states.get(item.id, {})
            rows = [got[str(j)][0] if str(j) in got else np.full(dim, np.nan, dtype=np.float32)
                    for j in range(len(outs))]
            if dim:
                out[item.id] = np.stack(rows)
        return out
