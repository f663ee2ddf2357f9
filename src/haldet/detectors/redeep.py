"""ReDeEP (Sun et al., ICLR 2025): hallucination in retrieval-augmented answers as too little use of the context by
the copying heads and too much parametric knowledge injected by the feed-forward layers.

Reads `redeep_features` ([L, H + 1] per answer: each head's external-context score ECS, each layer's
parametric-knowledge score PKS; `haldet.backends.hf.redeep`). As in the paper, the heads and layers are chosen on
labelled training items: the `top_heads` heads whose ECS correlates most negatively with hallucination and the
`top_layers` layers whose PKS correlates most positively (Pearson). The score is
`alpha * z(sum of chosen PKS) - beta * z(sum of chosen ECS)`, each sum standardised on the training items
(higher = more likely hallucinated). An item the evidence pass could not process (too long for its attention
budget, context not in the prompt) is NaN with that reason (variant `strict`, the default). Variant `paper` (TRIVIA+
appendix A.8: "an uninformative default score of 0.5", every test response counted) gives such an item
`default_score` instead, 0.0 by default: on this detector's standardised scale that is the training items' mean
score, the counterpart of 0.5 on the paper's [0, 1] scale; `meta` counts the defaulted items and says the coverage
the strict variant would show.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.probe_training import training_problem
from haldet.signals import Signal, SignalView


def _pearson(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of each column of X [n, m] with y [n]; 0 for a constant column."""
    xc, yc = X - X.mean(axis=0), y - y.mean()
    den = np.sqrt((xc**2).sum(axis=0) * (yc**2).sum())
    return np.divide(xc.T @ yc, den, out=np.zeros(X.shape[1]), where=den > 0)


@register("redeep")
class ReDeEP(Detector):
    method_family = "attention"
    paper = ("Sun et al. 2025, ReDeEP: detecting hallucination in retrieval-augmented generation via mechanistic "
             "interpretability")
    peers = ()
    requires = frozenset({Signal.REDEEP_FEATURES})
    trains = True
    version = "1"
    variants: ClassVar[dict[str, str]] = {
        "strict": "an item the evidence pass could not process -> NaN with the reason",
        "paper": "an item the evidence pass could not process -> default_score (TRIVIA+ appendix A.8's 0.5)",
    }
    defaults: ClassVar[dict[str, Any]] = {"variant": "strict", "top_heads": 32, "top_layers": 4, "alpha": 1.0,
                                          "beta": 1.0, "default_score": 0.0}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.heads: list[int] = []
        self.layers: list[int] = []
        self.shape: tuple[int, int] | None = None
        self.center = np.zeros(2)
        self.scale = np.ones(2)
        self.problem: str | None = None

    @staticmethod
    def _usable(values: list[Any]) -> tuple[np.ndarray, list[str | None]]:
        """Indices of items with scores, and per item the reason it has none."""
        why: list[str | None] = []
        for v in values:
            if v is None:
                why.append("no ReDeEP evidence for this item")
            elif isinstance(v, str):
                why.append(v)
            elif np.ndim(v) != 2 or np.shape(v)[1] < 2 or not np.isfinite(v).all():
                why.append(f"ReDeEP evidence of shape {np.shape(v)} is not a finite [L, H + 1] array")
            else:
                why.append(None)
        return np.array([i for i, w in enumerate(why) if w is None], dtype=int), why

    def _sums(self, x: np.ndarray) -> np.ndarray:
        ecs, pks = x[:, :-1].reshape(-1), x[:, -1]
        return np.array([pks[self.layers].sum(), ecs[self.heads].sum()])

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        values = train.get(Signal.REDEEP_FEATURES)
        ok, _ = self._usable(values)
        labels = None if train.labels is None else np.asarray(train.labels, dtype=float)
        shapes = {np.shape(values[i]) for i in ok}
        self.problem = training_problem(None if labels is None else labels[ok].astype(int))
        if self.problem is None and len(shapes) != 1:
            self.problem = f"training items carry ReDeEP evidence of several shapes {sorted(shapes)}"
        if self.problem is not None or labels is None:  # no labels is a training problem
            return
        X = np.stack([values[i] for i in ok]).astype(np.float64)  # [n, L, H + 1]
        y = labels[ok]
        n, n_layers, width = X.shape
        self.shape = (n_layers, width)
        head_corr = _pearson(X[:, :, :-1].reshape(n, -1), y)
        layer_corr = _pearson(X[:, :, -1], y)
        self.heads = [int(i) for i in np.argsort(head_corr, kind="stable")[: int(self.params["top_heads"])]]
        self.layers = [int(i) for i in np.argsort(-layer_corr, kind="stable")[: int(self.params["top_layers"])]]
        sums = np.stack([self._sums(x) for x in X])
        self.center = sums.mean(axis=0)
        scale = sums.std(axis=0)
        self.scale = np.where(scale > 1e-12, scale, 1.0)

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        values = items.get(Signal.REDEEP_FEATURES)
        _, why = self._usable(values)
        alpha, beta = float(self.params["alpha"]), float(self.params["beta"])
        defaulted = 0
        for i, (value, reason) in enumerate(zip(values, why, strict=True)):
            if reason is not None and isinstance(value, str) and self.params["variant"] == "paper" \
                    and self.problem is None:  # the pass could not process it: the paper's uninformative score
                out.set(i, float(self.params["default_score"]))
                defaulted += 1
            elif reason is not None:  # the item's own reason first (too long, no context), then the fit's
                out.invalid(i, reason)
            elif self.problem is not None:
                out.invalid(i, f"not fitted: {self.problem}")
            elif np.shape(value) != self.shape:
                out.invalid(i, f"ReDeEP evidence of shape {np.shape(value)}, trained on {self.shape}")
            else:
                z = (self._sums(np.asarray(value, dtype=np.float64)) - self.center) / self.scale
                out.set(i, float(alpha * z[0] - beta * z[1]))
        self.meta["defaulted"] = defaulted
        if defaulted:
            self.meta["note"] = (f"{defaulted}/{len(items)} items the evidence pass could not process scored "
                                 f"{self.params['default_score']} (paper variant); the strict variant's coverage "
                                 f"would be at most {1 - defaulted / len(items):.0%}")
        return out
