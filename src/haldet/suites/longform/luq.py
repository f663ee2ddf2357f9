"""LUQ (Zhang et al., 2024): long-text uncertainty as 1 - the answer's mean support by the K sampled answers.

For each unit s of the answer (its sentences for LUQ, its atomic claims for LUQ-Atomic: `unit`) and each sample r',
an NLI model reads (premise r', hypothesis s); the support S(s, r') is, with `support: two_way` (the paper's),
P(entail) / (P(entail) + P(contradict)) (neutral left out), or with `support: entail`, the raw P(entail) (as the
authors' released code and uqlm compute it: a neutral sample counts as no support). A unit's score is
1 - mean over samples of S; the answer's score is 1 - the mean support over its units (its sentences when it has no
units of kind `unit`). With `two_way` a unit's score is the same number as `selfcheck_claims`' (1 - e/(e+c) =
c/(c+e)); LUQ then differs only in reading sentences by default; `entail` is the variant that also counts the
samples that say nothing about the unit. NLI model and cache as `selfcheck_claims`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import register
from haldet.errors import HaldetError
from haldet.suites.longform.selfcheck_claims import SelfCheckClaims


@register("luq")
class LUQ(SelfCheckClaims):
    """Per unit: 1 - mean over the K samples of the NLI support S(unit, sample)."""

    method_family = "sample consistency"
    paper = "Zhang et al. 2024, LUQ: long-text uncertainty quantification for LLMs"
    peers = ("uqlm",)

    defaults: ClassVar[dict[str, Any]] = {**SelfCheckClaims.defaults, "unit": "sentence", "support": "two_way"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params["support"] not in ("two_way", "entail"):
            raise ValueError(f"detector 'luq' has no support {self.params['support']!r}; known: two_way, entail")

    def unit_scores(self, c: np.ndarray, e: np.ndarray) -> np.ndarray:
        how = self.params["support"]
        if how == "two_way":
            support = np.where(c + e > 0, e / np.maximum(c + e, 1e-300), 0.5)
        elif how == "entail":
            support = e
        else:
            raise HaldetError(f"support must be two_way or entail, not {how!r}", where="detector_params.luq.support")
        return np.asarray(1.0 - support.mean(axis=1))
