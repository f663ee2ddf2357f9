"""Statistics of the whole next-token distribution, read from the logits every pass already holds: the log
Chernoff coefficients between the model's distribution and the uniform one, and the KL divergence of the tempered
distributions from it (`Signal.TOKEN_CHERNOFF`), from which the Renyi divergence (alpha = 1 included, as its KL
limit) and the Fisher-Rao distance to uniform follow at any temperature the detectors allow.

A few reductions over the vocabulary per token beside the entropy's, computed in the same batched tensors, so the
decoding loop, the teacher-forced pass and the given-response pass give the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

from haldet.signals import CHERNOFF_EXPONENTS, KL_EXPONENTS


def chernoff_terms(logp: Any) -> Any:
    """[n, CHERNOFF_WIDTH] float64 of each row of `logp` [n, V] (log-probs of a distribution p over V outputs):
    log sum_v p_v^g (1/V)^(1 - g) for g in CHERNOFF_EXPONENTS, then KL(q_g || uniform) = sum_v q_v log(V q_v) for
    g in KL_EXPONENTS, q_g = p^g / sum_v p_v^g (a zero-probability output adds 0)."""
    import torch

    if logp.dtype in (torch.float16, torch.bfloat16):
        logp = logp.float()
    log_v = math.log(logp.shape[-1])
    cols = [torch.logsumexp(g * logp, dim=-1) - (1.0 - g) * log_v for g in CHERNOFF_EXPONENTS]
    for g in KL_EXPONENTS:
        q = torch.softmax(g * logp, dim=-1)
        cols.append(torch.special.xlogy(q, q).sum(-1) + log_v)
    return torch.stack(cols, dim=-1).double()
