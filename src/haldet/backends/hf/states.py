"""Reductions of one sequence's hidden states (and attention rows) that the teacher-forced pass and the answer
reader share: pooling over a span, layer indices, ICR features. Pure tensor code below both readers, so each
imports it instead of the other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from haldet.backends.base import ICR_COLUMNS, pooling_window
from haldet.errors import HaldetError


def layer_index(layer: int, n_states: int) -> int:
    idx = layer + n_states if layer < 0 else layer
    if not 0 <= idx < n_states:
        raise HaldetError(f"layer {layer} is out of range for a model with {n_states} hidden-state layers "
                          f"(0 = embeddings .. {n_states - 1})", where="features.layers / sample.hidden_layer")
    return idx


def pool_states(hidden: Sequence[Any], layers: list[int], row: int, start: int, end: int, name: str) -> np.ndarray:
    """[len(layers), D] pooled over the span [start, end): mean, last, tbg (start - 1), slt (end - 2), first:N /
    last:N (mean over the span's first / last N tokens, all of them when it is shorter)."""
    import torch

    window = pooling_window(name)
    if window is not None:
        side, n = window
        start, end = (start, min(end, start + n)) if side == "first" else (max(start, end - n), end)
    if name == "mean" or window is not None:
        vecs = [hidden[layer][row, start:end].float().mean(dim=0) for layer in layers]
    else:
        pos = {"last": end - 1, "tbg": start - 1, "slt": max(start, end - 2)}[name]
        vecs = [hidden[layer][row, pos].float() for layer in layers]
    return torch.stack(vecs).cpu().numpy().astype(np.float32)


def _jsd(p: Any, q: Any) -> Any:
    """Jensen-Shannon divergence (nats) between distributions along the last axis."""
    import torch

    m = 0.5 * (p + q)

    def kl(a: Any, b: Any) -> Any:
        return torch.where(a > 0, a * (torch.log(a.clamp_min(1e-30)) - torch.log(b.clamp_min(1e-30))), 0.0).sum(-1)

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def icr_features(hidden: Sequence[Any], attn_rows: Sequence[Any], start: int, end: int) -> np.ndarray:
    """Per-layer ICR features of one sequence (ICR Probe, Zhang et al. 2025, our implementation).

    For layer l (1..L) and answer position t, the residual update is d = h_l[t] - h_{l-1}[t]. Its projection onto
    each visible token's previous-layer state, <h_{l-1}[j], d> / |h_{l-1}[j]| for j <= t, softmaxed over j, says
    which tokens the update moved towards; the ICR score is the Jensen-Shannon divergence between that
    distribution and the layer's head-averaged attention row a_l[t, :t+1]. Columns (`ICR_COLUMNS`): mean, std and
    max of the score over answer tokens, and the mean relative update size |d| / |h_{l-1}[t]|.
    `hidden`: L + 1 tensors [S, D] (float32); `attn_rows`: L tensors [end - start, >= end], the head-averaged
    attention rows of the answer positions.
    """
    import torch

    n_layers = len(attn_rows)
    out = np.zeros((n_layers, len(ICR_COLUMNS)), dtype=np.float32)
    positions = torch.arange(start, end)
    for layer in range(1, n_layers + 1):
        prev = hidden[layer - 1][:end]
        delta = hidden[layer][positions] - prev[positions]  # [T, D]
        norms = prev.norm(dim=-1).clamp_min(1e-6)  # [S]
        proj = (delta @ prev.T) / norms  # [T, S]
        causal = torch.arange(end)[None, :] <= positions[:, None]
        proj = proj.masked_fill(~causal, float("-inf"))
        p = torch.softmax(proj, dim=-1)
        a = attn_rows[layer - 1][:, :end].float()
        a = a.masked_fill(~causal, 0.0)
        a = a / a.sum(-1, keepdim=True).clamp_min(1e-12)
        score = _jsd(p, a)
        ratio = delta.norm(dim=-1) / norms[positions]
        out[layer - 1] = [float(score.mean()), float(score.std(unbiased=False)), float(score.max()),
                          float(ratio.mean())]
    return out
