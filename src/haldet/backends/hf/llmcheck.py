"""LLM-Check-style unit scores (Sriramanan et al. 2024; VeriGray's "LLM-Check" baselines) from one teacher-forced
pass over prompt + response.

- Hidden score of a sentence at layer l: the mean log eigenvalue of the covariance of its tokens' hidden states,
  (1/m) sum_i log(sigma_i^2 + alpha), sigma_i the singular values of the m x D matrix of the sentence's token
  states centred over its tokens (alpha keeps the centring's zero eigenvalue finite).
- Attention score at layer l: the log-determinant of each head's self-attention restricted to the sentence's
  tokens, which for a causal (lower-triangular) map is the sum of log A[t, t]; averaged over the sentence's tokens
  and summed over heads.

The layer, and the direction in which a score means "hallucinated" (the method does not fix it), are chosen on the
validation split by AUROC (`choose_layer`), never on test. The evidence comes from the generate stage's token pass
(`Signal.UNIT_HIDDEN_SCORES`, `Signal.TOKEN_ATTN_LOGDIAG`); the detectors are `haldet.detectors.llmcheck`.
"""

from __future__ import annotations

import numpy as np

from haldet.evaluation.metrics import auroc

ALPHA = 1e-3


def hidden_score(states: np.ndarray, alpha: float = ALPHA) -> float:
    """states: [m, D] hidden states of one sentence's m tokens at one layer."""
    z = np.asarray(states, dtype=np.float64)
    z = z - z.mean(axis=0, keepdims=True)
    sigma = np.linalg.svd(z, compute_uv=False)
    eig = np.zeros(len(z))
    eig[: len(sigma)] = sigma[: len(z)] ** 2
    return float(np.mean(np.log(eig + alpha)))


def choose_layer(scores: np.ndarray, y: np.ndarray) -> tuple[int, float, float]:
    """(layer, sign, validation AUROC): the layer column of `scores` [n, L] and the sign (+1 or -1) whose signed
    score best separates y = 1 (hallucinated) from y = 0; units with y < 0 (no binary label) are ignored. Layers
    without a valid score or without both classes are skipped; (-1, nan, nan) when none qualifies."""
    scores, y = np.asarray(scores, dtype=np.float64), np.asarray(y)
    best = (-1, np.nan, np.nan)
    for layer in range(scores.shape[1]):
        keep = (y >= 0) & np.isfinite(scores[:, layer])
        if len(set(y[keep].tolist())) < 2:
            continue
        auc = auroc(y[keep], scores[keep, layer])
        sign, value = (1.0, auc) if auc >= 0.5 else (-1.0, 1.0 - auc)
        if not np.isfinite(best[2]) or value > best[2]:
            best = (layer, sign, value)
    return best


def unit_hidden_scores(states: np.ndarray, spans: list[tuple[int, int]], alpha: float = ALPHA) -> np.ndarray:
    """[L, U] hidden score of each unit (token index range [a, b)) at each layer of `states` [L, T, D]; NaN for a
    unit without tokens."""
    out = np.full((states.shape[0], len(spans)), np.nan)
    for u, (a, b) in enumerate(spans):
        if b > a:
            for layer in range(states.shape[0]):
                out[layer, u] = hidden_score(states[layer, a:b], alpha)
    return out
