"""The `hf` backend's teacher-forced pass over exact token ids (`HFBackend.forward`).

Right-padded, so positions are the natural ones: log-probs and entropies of the answer tokens, pooled hidden
states, and ICR features from attentions captured by hooks (eager attention only for that pass). A request's
branches share its pass in one packed row with a tree-shaped attention mask where the model allows it
(`LoadedModel.packs_branches`), else they run as separate sequences. Takes the backend as a `LoadedModel`
argument: this module sits below `backend` and never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from haldet.backends.base import POOLINGS, ForwardOutput, ForwardRequest, known_pooling
from haldet.backends.hf.distribution import chernoff_terms
from haldet.backends.hf.loading import LoadedModel, attention_hooks
from haldet.backends.hf.states import icr_features, layer_index, pool_states
from haldet.errors import HaldetError


@dataclass
class _Row:
    """A request as it is run: its index, the (possibly head-dropped) ids and span start, and its branches."""

    index: int
    ids: list[int]
    start: int
    info: dict[str, Any] | None
    branches: dict[str, list[int]] = field(default_factory=dict)

    @property
    def width(self) -> int:
        return len(self.ids) + sum(len(b) for b in self.branches.values())


def forward(backend: LoadedModel, requests: list[ForwardRequest], *, layers: Sequence[int] | None,
            poolings: Sequence[str], logprobs: bool, icr: bool, batch_size: int, progress: Any = None,
            branch_pooling: str = "last") -> list[ForwardOutput]:
    """`Backend.forward` for the `hf` backend: one pass per batch, rows sorted by width."""
    import torch

    try:
        unknown = sorted(p for p in {*poolings, branch_pooling} if not known_pooling(p))
    except ValueError as exc:
        raise HaldetError(str(exc), where="features.pooling", hint="first:N / last:N with N >= 1") from None
    if unknown:
        raise HaldetError(f"unknown pooling(s) {unknown}", where="features.pooling",
                          hint=f"choose from {', '.join(POOLINGS)}, first:N or last:N")
    for req in requests:
        if not 1 <= req.start <= len(req.ids):
            raise ValueError(f"request {req.key}: span start {req.start} outside 1..{len(req.ids)}")
        if not all(req.branches.values()):
            raise ValueError(f"request {req.key}: a branch has no tokens")
    if any(req.branches for req in requests) and not backend.packs_branches():
        return forward_unpacked(backend, requests, layers=layers, poolings=poolings, logprobs=logprobs, icr=icr,
                                 batch_size=batch_size, progress=progress, branch_pooling=branch_pooling)
    model = backend.model
    n_states = backend.layer_count() + 1
    chosen = list(range(n_states)) if layers is None else [layer_index(x, n_states) for x in layers]
    window = backend.window()
    outputs: list[ForwardOutput | None] = [None] * len(requests)
    runnable: list[_Row] = []
    for i, req in enumerate(requests):
        ids, start, info = req.ids, req.start, None
        extra = max((len(b) for b in req.branches.values()), default=0)  # positions the branches go past ids
        if len(ids) + extra > window:
            if len(ids) - start + 1 + extra > window:
                outputs[i] = ForwardOutput(key=req.key, n_tokens=len(ids), window={
                    "policy": "skipped", "tokens": len(ids) + extra, "window": window,
                    "reason": "the answer alone exceeds the model window"})
                continue
            drop = len(ids) + extra - window
            ids, start = ids[drop:], start - drop
            info = {"policy": "dropped_prompt_head", "tokens": len(req.ids) + extra, "window": window,
                    "dropped_tokens": drop}
        runnable.append(_Row(i, ids, start, info, req.branches))
    runnable.sort(key=lambda r: r.width)
    captured: list[Any] = []

    def capture(module: Any, args: Any, out: Any) -> None:
        captured.append(out[1].float().mean(dim=1) if out[1] is not None else None)

    with attention_hooks(backend, capture if icr else None):
        for begin in range(0, len(runnable), max(1, batch_size)):
            batch = runnable[begin : begin + max(1, batch_size)]
            captured.clear()
            with torch.inference_mode():
                out = model(**_packed_inputs(backend, batch), output_hidden_states=True, use_cache=False,
                            logits_to_keep=1)
                hidden = out.hidden_states
                if icr and (len(captured) != n_states - 1 or any(a is None for a in captured)):
                    raise HaldetError("this model did not expose attention weights for ICR features",
                                      where=f"model {backend.name}",
                                      hint="drop the icr feature group (features.groups)")
                for row, r in enumerate(batch):
                    outputs[r.index] = _row_output(backend, requests[r.index].key, r, row, hidden, captured,
                                                   chosen, poolings=poolings, logprobs=logprobs, icr=icr,
                                                   branch_pooling=branch_pooling)
            if progress is not None:
                progress(len(batch))
    return [o for o in outputs if o is not None]


def _row_output(backend: LoadedModel, key: str, r: _Row, row: int, hidden: Sequence[Any],
                captured: Sequence[Any], chosen: list[int], *, poolings: Sequence[str], logprobs: bool, icr: bool,
                branch_pooling: str) -> ForwardOutput:
    """One request's results from its row of a batch: answer-span statistics, then each branch pooled."""
    start, end = r.start, len(r.ids)
    res = ForwardOutput(key=key, n_tokens=end, window=r.info)
    if end > start:
        if logprobs:
            res.token_logprobs, res.token_entropies, res.token_chernoff = _token_stats(backend, hidden[-1][row],
                                                                                       r.ids, start)
        for name in poolings:
            res.pooled[name] = pool_states(hidden, chosen, row, start, end, name)
        if icr:
            res.icr = icr_features([h[row].float() for h in hidden], [a[row][start:end] for a in captured],
                                   start, end)
    offset = end
    for name, suffix in r.branches.items():
        res.branch_states[name] = pool_states(hidden, chosen, row, offset, offset + len(suffix), branch_pooling)
        offset += len(suffix)
    return res


def _packed_inputs(backend: LoadedModel, rows: Sequence[_Row]) -> dict[str, Any]:
    """Right-padded ids (positions are the natural ones). Rows with branches are packed as
    ids + branch 1 + branch 2 ...: explicit positions (each branch continues from len(ids)) and a 4D additive
    mask in which a branch token sees the sequence and its own branch only (a padding token sees itself)."""
    import torch

    width = max(r.width for r in rows)
    ids_t = torch.full((len(rows), width), backend.tokenizer.pad_token_id, dtype=torch.long)
    segment = torch.full((len(rows), width), -1, dtype=torch.long)  # 0 = sequence, k = branch k, -1 = pad
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for row, r in enumerate(rows):
        seq, seg, pos = list(r.ids), [0] * len(r.ids), list(range(len(r.ids)))
        for k, suffix in enumerate(r.branches.values(), start=1):
            seq += suffix
            seg += [k] * len(suffix)
            pos += range(len(r.ids), len(r.ids) + len(suffix))
        ids_t[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        segment[row, : len(seq)] = torch.tensor(seg, dtype=torch.long)
        positions[row, : len(seq)] = torch.tensor(pos, dtype=torch.long)
    if not any(r.branches for r in rows):
        return {"input_ids": ids_t.to(backend.device), "attention_mask": (segment >= 0).long().to(backend.device)}
    index = torch.arange(width)
    query, key = segment[:, :, None], segment[:, None, :]
    allowed = (index[None, :] <= index[:, None]) & (key >= 0) & ((key == 0) | (key == query))
    allowed |= torch.eye(width, dtype=torch.bool)
    mask = torch.zeros(allowed.shape, dtype=backend.dtype).masked_fill(~allowed, torch.finfo(backend.dtype).min)
    return {"input_ids": ids_t.to(backend.device), "attention_mask": mask[:, None].to(backend.device),
            "position_ids": positions.to(backend.device)}


def forward_unpacked(backend: LoadedModel, requests: list[ForwardRequest], **kwargs: Any) -> list[ForwardOutput]:
    """Branches as separate sequences (ids + suffix, the suffix pooled): same results, more compute."""
    pooling = kwargs.pop("branch_pooling")
    main = forward(backend, [replace(r, branches={}) for r in requests], **kwargs)
    branch_requests = [ForwardRequest(ids=r.ids + suffix, start=len(r.ids), key=f"{i}\x00{name}")
                       for i, r in enumerate(requests) for name, suffix in r.branches.items()]
    kwargs.update(poolings=[pooling], logprobs=False, icr=False)
    for out in forward(backend, branch_requests, **kwargs):
        index, _, name = out.key.partition("\x00")
        target = main[int(index)]
        if pooling in out.pooled:
            target.branch_states[name] = out.pooled[pooling]
        if out.window is not None and target.window is None:
            target.window = out.window
    return main


def _token_stats(backend: LoadedModel, last_hidden: Any, ids: list[int],
                 start: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log-prob, entropy and log Chernoff coefficients to uniform at each answer position, from the final hidden
    states of that row only."""
    import torch

    logp = backend.answer_log_softmax(last_hidden, ids, start)
    target = torch.tensor(ids[start:], dtype=torch.long, device=logp.device)
    token_lp = logp.gather(-1, target[:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).nan_to_num().sum(-1)
    return token_lp.double().cpu().numpy(), entropy.double().cpu().numpy(), chernoff_terms(logp).cpu().numpy()
