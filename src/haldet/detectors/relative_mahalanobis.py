"""Relative Mahalanobis distance (Ren et al. 2023, "Out-of-Distribution Detection and Selective Generation for
Conditional Language Models"): the Mahalanobis distance to the answers judged correct minus the distance to a
background Gaussian fitted on every training answer, so directions in which all answers vary alike cancel out.

RMD(h) = MD_correct(h) - MD_all(h), both Gaussians fitted on the train view's mean-pooled hidden states of `layer`
(the correct ones on label-0 answers, the background on all of them) exactly as `mahalanobis` fits its one
(`haldet.detectors.mahalanobis`: pseudo-inverse covariance, `layer` an integer or "val")."""

from __future__ import annotations

import numpy as np

from haldet.detectors.base import register
from haldet.detectors.mahalanobis import Gaussian, Mahalanobis


@register("relative_mahalanobis")
class RelativeMahalanobis(Mahalanobis):
    method_family = "internal states"
    paper = "Ren et al. 2023, A simple fix to Mahalanobis distance for improving near-OOD detection"
    peers = ("lm-polygraph",)
    def fit_layer(self, X: np.ndarray, y: np.ndarray) -> dict[str, Gaussian]:
        return {"correct": Gaussian.fit(X[y == 0]), "background": Gaussian.fit(X)}

    def distances(self, fitted: dict[str, Gaussian], X: np.ndarray) -> np.ndarray:
        return fitted["correct"].distance(X) - fitted["background"].distance(X)
