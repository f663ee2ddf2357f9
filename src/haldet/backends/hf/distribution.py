"""Statistics of the whole next-token distribution, read from the logits every pass already holds: the log
Chernoff coefficients between the model's distribution and the uniform one (`Signal.TOKEN_CHERNOFF`), from which
the Renyi divergence and the Fisher-Rao distance to uniform follow at any temperature the detectors allow.

Two log-sum-exps over the vocabulary per token beside the entropy's, computed in the same batched tensors, so the
decoding loop, the teacher-forced pass and the given-response pass give the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

from haldet.signals import CHERNOFF_EXPONENTS


def chernoff_terms(logp: Any) -> Any:
    """[n, len(CHERNOFF_EXPONENTS)] float64: log sum_v p_v^g (1/V)^(1 - g) of each row of `logp` [n, V] (log-probs
    of a distribution over V outputs), for each exponent g."""
    import torch

    if logp.dtype in (torch.float16, torch.bfloat16):
        logp = logp.float()
    log_v = math.log(logp.shape[-1])
    cols = [torch.logsumexp(g * logp, dim=-1) - (1.0 - g) * log_v for g in CHERNOFF_EXPONENTS]
    return torch.stack(cols, dim=-1).double()
