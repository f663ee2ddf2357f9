"""HaloScope (Du et al. 2024; paper appendix E.16): hallucination detection from unlabeled generations.

Faithful (default, `variant="unsupervised"`), following the method's source:
1. The training split's generations are the unlabeled "wild" data; their labels are never read for fitting.
   Features are the last-token states of the answer (HIDDEN_LAST) at one layer, centred with the train mean.
2. Membership score from the top-k singular vectors v_j (singular values s_j) of the centred train matrix:
   zeta(f) = (1/k) sum_j s_j <f - mu, v_j>^2 (the weighted projection norm of the paper).
3. Pseudo-labels: wild items whose oriented score exceeds the q-th quantile are "hallucinated" (1), the rest 0.
4. A binary classifier (the source's non-linear probe: one hidden layer of 1024, SGD with momentum 0.9, lr 0.05
   with cosine decay, weight decay 3e-4, batches of 512, 50 epochs; here on train-standardised features) learns
   the pseudo-labels; its P(1) is the score.
The settings the source picks with a small labelled set (layer, k in 1..10, the score's sign, the quantile q
from a 38-point grid) are chosen on the validation view only. Without validation labels of both classes there is
nothing to choose them with: the detector is not fitted (every score NaN with that reason) unless
`unlabelled_defaults: true` asks for fixed settings (last layer, k=1, sign +1, q=0.5), which are then recorded in
`fit_info` and in the row's note.

`variant="label_guided"` (OpenHalDet E.16): mean-pooled states (HIDDEN_MEAN) of the chosen layer; PCA of the
centred train features (up to 15 components); k and sign chosen by AUROC of the unweighted projection norm on the
*training labels*; quantiles 10%..90% in 17 steps, each scored by the train-label AUROC of a balanced logistic
regression trained on its pseudo-labels; the final balanced logistic regression (max_iter 1000) on the chosen
pseudo-labels gives the score.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.linear_model import LogisticRegression

from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.probe import layer_row, pooled_signal, probe_scores, stack
from haldet.detectors.probe_training import (
    Standardizer,
    TrainedMLP,
    has_both_classes,
    safe_auroc,
    train_mlps,
    training_problem,
)
from haldet.signals import Signal, SignalView


def membership_scores(F: np.ndarray, mean: np.ndarray, V: np.ndarray, s: np.ndarray, k: int,
                      weighted: bool = True) -> np.ndarray:
    """(1/k) sum_{j<k} w_j <f - mean, v_j>^2 with w_j = s_j (weighted) or 1; V rows are singular vectors."""
    proj = (F - mean) @ V[:k].T
    w = s[:k] if weighted else np.ones(k)
    return (proj ** 2 * w).sum(axis=1) / k


@register("haloscope")
class HaloScope(Detector):
    method_family = "internal states"
    paper = "Du et al. 2024, HaloScope: harnessing unlabeled LLM generations for hallucination detection"
    peers = ()
    requires = frozenset({Signal.HIDDEN_LAST, Signal.HIDDEN_MEAN})
    trains = True
    version = "2"  # 2: no hard-coded settings without usable validation labels
    variants: ClassVar[dict[str, str]] = {
        "unsupervised": "membership estimation on unlabeled train generations; labels only choose settings on val",
        "label_guided": "OpenHalDet E.16: PCA k/sign and pseudo-label threshold searched with train labels",
    }
    defaults: ClassVar[dict[str, Any]] = {
        "variant": "unsupervised", "layer": "val", "max_k": 10, "weighted": True, "n_quantiles": 38,
        "hidden": [1024], "epochs": 50, "batch_size": 512, "lr": 0.05, "weight_decay": 3e-4,
        "optimizer": "sgd_cosine", "seed": 42, "unlabelled_defaults": False,
        "device": "auto", "pooling": None,  # None: the variant's (last; label_guided mean); or first_n / last_n
        # label_guided
        "pca_components": 15, "lg_quantiles": [0.1, 0.9, 17], "lg_max_iter": 1000}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.problem: str | None = "not fitted"
        self.fit_info: dict[str, Any] = {}
        self.model: TrainedMLP | None = None  # unsupervised variant's classifier (label_guided uses self.clf)
        _ = self.signal  # an unknown pooling fails here, before any work

    @property
    def signal(self) -> Signal:
        if self.params["pooling"] is not None:
            return pooled_signal(self.name, self.params["pooling"])
        return Signal.HIDDEN_MEAN if self.params["variant"] == "label_guided" else Signal.HIDDEN_LAST

    def signals(self) -> frozenset[Signal]:
        return self.requires | {self.signal}

    def _features(self, view: SignalView, layer: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        values = view.get(self.signal)
        first = next((np.asarray(v) for v in values if v is not None), None)
        row = layer_row(first.shape[0], layer) if first is not None else 0
        return stack(values, lambda v: v[row])

    def _n_rows(self, view: SignalView) -> int:
        first = next((np.asarray(v) for v in view.get(self.signal) if v is not None), None)
        return 0 if first is None else int(first.shape[0])

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.problem, self.fit_info = None, {}
        if train.labels is None:
            self.problem = "no training view labels to check the split"
            return
        self.problem = training_problem(np.asarray(train.labels))
        if self.problem is not None:
            return
        if self.params["variant"] == "label_guided":
            self._fit_label_guided(train)
        else:
            self._fit_unsupervised(train, val)

    # -- faithful ------------------------------------------------------------------------------------------
    def _fit_unsupervised(self, train: SignalView, val: SignalView | None) -> None:
        p = self.params
        val_ok = val is not None and val.labels is not None and has_both_classes(np.asarray(val.labels))
        if not val_ok and not p["unlabelled_defaults"]:
            self.problem = ("no validation labels of both classes to choose HaloScope's layer, k, sign and quantile "
                            "(set unlabelled_defaults: true for the fixed, flagged defaults)")
            return
        layers = list(range(self._n_rows(train))) if p["layer"] == "val" and val_ok else [
            -1 if p["layer"] == "val" else int(p["layer"])]
        best: dict[str, Any] | None = None
        for layer in layers:
            F, ok, _ = self._features(train, layer)
            F = F[ok]
            if len(F) < 10:
                self.problem = f"only {len(F)} training items with features (need at least 10)"
                return
            mean = F.mean(axis=0)
            _, s, Vt = np.linalg.svd(F - mean, full_matrices=False)
            max_k = max(1, min(int(p["max_k"]), len(s)))
            if not val_ok or val is None:
                best = {"layer": layer, "k": 1, "sign": 1.0, "mean": mean, "V": Vt[:max_k], "s": s[:max_k],
                        "val_auroc": None}
                continue
            Fv, okv, _ = self._features(val, layer)
            yv = np.asarray(val.labels)[okv].astype(int)
            for k in range(1, max_k + 1):
                auc = safe_auroc(yv, membership_scores(Fv[okv], mean, Vt, s, k, p["weighted"]))
                if not np.isfinite(auc):
                    continue
                sign, auc = (1.0, auc) if auc >= 0.5 else (-1.0, 1.0 - auc)
                if best is None or auc > best["val_auroc"]:
                    best = {"layer": layer, "k": k, "sign": sign, "mean": mean, "V": Vt[:max_k], "s": s[:max_k],
                            "val_auroc": auc}
        if best is None:
            self.problem = "no usable layer for the membership score"
            return
        self.layer = int(best["layer"])
        F, ok, _ = self._features(train, self.layer)
        F = F[ok]
        zeta = best["sign"] * membership_scores(F, best["mean"], best["V"], best["s"], best["k"], p["weighted"])
        self.scaler = Standardizer.fit(F)
        Z = self.scaler.transform(F)
        grid = np.linspace(0, 1, int(p["n_quantiles"]) + 2)[1:-1]
        chosen: tuple[float, float, TrainedMLP] | None = None
        Zv = yv = None
        if val_ok and val is not None:
            Fv, okv, _ = self._features(val, self.layer)
            Zv, yv = self.scaler.transform(Fv[okv]), np.asarray(val.labels)[okv].astype(int)
        candidates = grid if Zv is not None else np.array([0.5])
        tried: set[bytes] = set()
        pseudos: list[tuple[float, np.ndarray]] = []
        for q in candidates:
            pseudo = (zeta > np.quantile(zeta, q)).astype(int)
            if not has_both_classes(pseudo) or pseudo.tobytes() in tried:
                # the same pseudo-labels as an earlier quantile (tens of wild items, 38 quantiles) train the same
                # seeded classifier to the same validation AUROC, which never replaces the earlier choice
                continue
            tried.add(pseudo.tobytes())
            pseudos.append((float(q), pseudo))
        # the seeded trainings are independent: side by side on the free cores, each bit-identical to training alone
        models = train_mlps(Z, [pseudo for _, pseudo in pseudos], hidden=p["hidden"], n_out=1, epochs=p["epochs"],
                            batch_size=p["batch_size"], lr=p["lr"], weight_decay=p["weight_decay"],
                            optimizer=p["optimizer"], seed=p["seed"], device=p["device"])
        for (q, _), model in zip(pseudos, models, strict=True):
            auc = 0.0 if Zv is None or yv is None else safe_auroc(yv, model.predict(Zv, p["device"]))
            if chosen is None or (np.isfinite(auc) and auc > chosen[0]):
                chosen = (auc, q, model)
        if chosen is None:
            self.problem = "membership scores gave single-class pseudo-labels at every threshold"
            return
        self.model = chosen[2]
        self.fit_info = {"variant": "unsupervised", "layer": self.layer, "k": best["k"], "sign": best["sign"],
                         "membership_val_auroc": best["val_auroc"], "quantile": chosen[1],
                         "classifier_val_auroc": chosen[0] if Zv is not None else None,
                         "settings_from": "validation labels" if Zv is not None else
                         "fixed defaults (unlabelled_defaults: no usable validation labels)",
                         "n_wild": len(F), **self.model.info}

    # -- the paper's variant -------------------------------------------------------------------------------
    def _fit_label_guided(self, train: SignalView) -> None:
        p = self.params
        self.layer = -1 if p["layer"] == "val" else int(p["layer"])
        F, ok, _ = self._features(train, self.layer)
        y = np.asarray(train.labels)[ok].astype(int)
        self.problem = training_problem(y)
        if self.problem is not None:
            return
        F = F[ok]
        mean = F.mean(axis=0)
        _, _, Vt = np.linalg.svd(F - mean, full_matrices=False)
        n_comp = max(1, min(int(p["pca_components"]), *F.shape))
        proj = (F - mean) @ Vt[:n_comp].T
        best_k, best_sign, best_auc = 1, 1.0, -1.0
        for k in range(1, n_comp + 1):
            auc = safe_auroc(y, np.linalg.norm(proj[:, :k], axis=1))
            for sign, a in ((1.0, auc), (-1.0, 1.0 - auc)):
                if a > best_auc:
                    best_k, best_sign, best_auc = k, sign, a
        magnitude = best_sign * np.linalg.norm(proj[:, :best_k], axis=1)
        self.scaler = Standardizer.fit(F)
        Z = self.scaler.transform(F)
        lo, hi, n = p["lg_quantiles"]
        best_q, best_q_auc = None, -1.0
        for q in np.linspace(lo, hi, int(n)):
            pseudo = (magnitude > np.percentile(magnitude, 100 * q)).astype(int)
            if not has_both_classes(pseudo):
                continue
            tmp = LogisticRegression(class_weight="balanced", max_iter=int(p["lg_max_iter"])).fit(Z, pseudo)
            auc = safe_auroc(y, tmp.predict_proba(Z)[:, 1])
            if auc > best_q_auc:
                best_q, best_q_auc = float(q), auc
        if best_q is None:
            self.problem = "pseudo-labels were single-class at every threshold"
            return
        pseudo = (magnitude > np.percentile(magnitude, 100 * best_q)).astype(int)
        self.clf = LogisticRegression(class_weight="balanced", max_iter=int(p["lg_max_iter"])).fit(Z, pseudo)
        self.model = None
        self.fit_info = {"variant": "label_guided", "layer": self.layer, "k": best_k, "sign": best_sign,
                         "train_auroc_magnitude": round(best_auc, 4), "quantile": best_q,
                         "train_auroc_pseudo_lr": round(best_q_auc, 4), "n_train": len(y)}

    def score(self, items: SignalView) -> Scores:
        self.meta["fit"] = {**self.fit_info, "problem": self.problem}
        if str(self.fit_info.get("settings_from", "")).startswith("fixed defaults"):
            self.meta["note"] = "HaloScope settings fixed (last layer, k=1, sign +1, q=0.5): no usable validation"

        def predict(X: np.ndarray) -> np.ndarray:
            Z = self.scaler.transform(X)
            if self.model is not None:
                return self.model.predict(Z, self.params["device"])
            return self.clf.predict_proba(Z)[:, 1]

        return probe_scores(len(items), self.problem, lambda: self._features(items, self.layer), predict)
