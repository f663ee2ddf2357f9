"""CCS, contrast-consistent search (paper appendix E.9; Burns et al. 2023): an unsupervised linear probe on
the states of a statement pair ("the answer is correct" / its negation) whose two outputs must be consistent
(p0 ~ 1 - p1) and confident (not both ~0.5).

Each view is normalised with train statistics (mean, and std when `var_normalize`, as in the CCS paper), a
linear sigmoid probe is trained with AdamW (lr 1e-3, weight decay 0.01, full batch, 1,000 epochs) from 10 random
starts (seeded; trained together as one batched model), and the start with the lowest CCS loss

    L = mean(min(p0, p1)^2) + mean((p0 - (1 - p1))^2)

is kept. The loss uses no labels. The raw score r = (p0 + 1 - p1) / 2 has no intrinsic direction, so its
orientation is learned on the training labels only (flipped when its train AUROC is below 0.5); the test view
never influences it. Unlike the paper's implementation, an unfitted probe or a numerical failure gives NaN with
a reason, not 0.5.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.probe import layer_row, probe_scores, stack
from haldet.detectors.probe_training import (
    Standardizer,
    resolve_device,
    safe_auroc,
    small_model_threads,
    training_problem,
)
from haldet.signals import Signal, SignalView


def ccs_loss(p0: torch.Tensor | np.ndarray, p1: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Informative + consistent terms, averaged over items (last axis); one value per leading index."""
    a, b = torch.as_tensor(p0), torch.as_tensor(p1)
    informative = torch.minimum(a, b).pow(2).mean(dim=-1)
    consistent = (a - (1 - b)).pow(2).mean(dim=-1)
    return informative + consistent


@register("ccs")
class Ccs(Detector):
    method_family = "internal states"
    paper = "Burns et al. 2023, Discovering latent knowledge in language models without supervision"
    peers = ()
    requires = frozenset({Signal.CCS_FEATURES})
    trains = True
    defaults: ClassVar[dict[str, Any]] = {
        "layer": -1, "epochs": 1000, "n_tries": 10, "lr": 1e-3, "weight_decay": 0.01, "var_normalize": True,
        "seed": 42, "device": "auto"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.problem: str | None = "not fitted"
        self.fit_info: dict[str, Any] = {}

    def _pairs(self, view: SignalView) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        values = view.get(Signal.CCS_FEATURES)
        first = next((np.asarray(v) for v in values if v is not None), None)
        row = layer_row(first.shape[1], int(self.params["layer"])) if first is not None else 0
        X, ok, reasons = stack(values, lambda v: np.concatenate([v[0, row], v[1, row]]))
        d = X.shape[1] // 2
        return X[:, :d], X[:, d:], ok, reasons

    def _normalise(self, x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.norm0.transform(x0), self.norm1.transform(x1)

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.problem, self.fit_info = None, {}
        x0, x1, ok, _ = self._pairs(train)
        y = None if train.labels is None else np.asarray(train.labels)[ok].astype(int)
        self.problem = training_problem(y)
        if self.problem is not None:
            return
        assert y is not None
        x0, x1 = x0[ok], x1[ok]
        self.norm0, self.norm1 = Standardizer.fit(x0), Standardizer.fit(x1)
        if not self.params["var_normalize"]:
            self.norm0.scale[:] = 1.0
            self.norm1.scale[:] = 1.0
        z0, z1 = self._normalise(x0, x1)
        dev = resolve_device(self.params["device"])
        with small_model_threads(dev):
            losses, w, b = self._train(z0, z1, dev)
        if not np.isfinite(losses).any():
            self.problem = "CCS training diverged (non-finite loss in every start)"
            return
        best = int(np.nanargmin(losses))
        self.w = w[best].detach().cpu().double().numpy()
        self.b = float(b[best].detach().cpu())
        self.sign = 1.0
        raw = self._raw(z0, z1)
        auc = safe_auroc(y, raw)
        self.sign = -1.0 if auc < 0.5 else 1.0
        self.fit_info = {"loss_by_start": [round(float(v), 6) for v in losses], "best_start": best,
                         "train_auroc_raw": round(auc, 4), "flipped": self.sign < 0, "n_train": len(y)}

    def _train(self, z0: np.ndarray, z1: np.ndarray, dev: torch.device
               ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        """All starts at once: weights [tries, D], biases [tries]; returns final losses and parameters."""
        p = self.params
        torch.manual_seed(p["seed"])
        t0 = torch.as_tensor(z0, dtype=torch.float32, device=dev)
        t1 = torch.as_tensor(z1, dtype=torch.float32, device=dev)
        n_tries, d = int(p["n_tries"]), z0.shape[1]
        bound = 1.0 / np.sqrt(d)  # nn.Linear's default initialisation range, one probe per start
        w = torch.empty(n_tries, d, device=dev).uniform_(-bound, bound).requires_grad_()
        b = torch.empty(n_tries, device=dev).uniform_(-bound, bound).requires_grad_()
        opt = torch.optim.AdamW([w, b], lr=p["lr"], weight_decay=p["weight_decay"])
        for _ in range(int(p["epochs"])):
            q0 = torch.sigmoid(w @ t0.T + b[:, None])  # [tries, n]
            q1 = torch.sigmoid(w @ t1.T + b[:, None])
            loss = ccs_loss(q0, q1)
            opt.zero_grad()
            loss.sum().backward()  # starts are independent: the sum's gradient is each start's own
            opt.step()
        with torch.no_grad():
            final = ccs_loss(torch.sigmoid(w @ t0.T + b[:, None]), torch.sigmoid(w @ t1.T + b[:, None]))
        losses = final.cpu().numpy()
        return losses, w, b

    def _raw(self, z0: np.ndarray, z1: np.ndarray) -> np.ndarray:
        p0 = 1.0 / (1.0 + np.exp(-(z0 @ self.w + self.b)))
        p1 = 1.0 / (1.0 + np.exp(-(z1 @ self.w + self.b)))
        return 0.5 * (p0 + 1.0 - p1)

    def score(self, items: SignalView) -> Scores:
        self.meta["fit"] = {**self.fit_info, "problem": self.problem}

        def pairs() -> tuple[np.ndarray, np.ndarray, list[str]]:
            x0, x1, ok, reasons = self._pairs(items)
            return np.stack([x0, x1], axis=1), ok, reasons

        def predict(pair: np.ndarray) -> np.ndarray:
            raw = self._raw(*self._normalise(pair[:, 0], pair[:, 1]))
            return raw if self.sign > 0 else 1.0 - raw

        return probe_scores(len(items), self.problem, pairs, predict)
