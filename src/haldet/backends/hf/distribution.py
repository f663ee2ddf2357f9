"""Statistics of the whole next-token distribution, read from the logits every pass already holds: the log
Chernoff coefficients between the model's distribution and the uniform one, and the KL divergence of the tempered
distributions from it (`Signal.TOKEN_CHERNOFF`), from which the Renyi divergence (alpha = 1 included, as its KL
limit) and the Fisher-Rao distance to uniform follow at any temperature the detectors allow.

One exponential over the vocabulary per exponent (0.25, 0.5, 1) per token beside the entropy's, computed in the
same batched tensors, so the decoding loop, the teacher-forced pass and the given-response pass give the same
numbers.
"""

from __future__ import annotations

import math
from typing import Any

from haldet.signals import CHERNOFF_EXPONENTS, KL_EXPONENTS


def chernoff_terms(logp: Any) -> Any:
    """[n, CHERNOFF_WIDTH] float64 of each row of `logp` [n, V] (log-probs of a distribution p over V outputs):
    log sum_v p_v^g (1/V)^(1 - g) for g in CHERNOFF_EXPONENTS, then KL(q_g || uniform) = sum_v q_v log(V q_v) for
    g in KL_EXPONENTS, q_g = p^g / sum_v p_v^g (a zero-probability output adds 0). One exponential over the
    vocabulary per exponent serves both: with Z_g = sum_v p_v^g, log q_g = g log p - log Z_g, so
    KL(q_g || u) = g sum_v q_v log p_v - log Z_g + log V."""
    import torch

    if logp.dtype in (torch.float16, torch.bfloat16):
        logp = logp.float()
    log_v = math.log(logp.shape[-1])
    log_z, kl = {}, {}
    for g in sorted(set(CHERNOFF_EXPONENTS) | set(KL_EXPONENTS)):
        scaled = g * logp
        top = scaled.amax(dim=-1, keepdim=True)
        e = torch.exp(scaled - top)
        total = e.sum(dim=-1)
        log_z[g] = top.squeeze(-1) + torch.log(total)
        if g in KL_EXPONENTS:
            q = e / total.unsqueeze(-1)
            kl[g] = g * (q * logp).nan_to_num(nan=0.0).sum(dim=-1) - log_z[g] + log_v
    cols = [log_z[g] - (1.0 - g) * log_v for g in CHERNOFF_EXPONENTS] + [kl[g] for g in KL_EXPONENTS]
    return torch.stack(cols, dim=-1).double()
