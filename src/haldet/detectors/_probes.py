"""Shared machinery of the white-box probes: feature stacking, the training-set checks, standardisation, one
seeded torch MLP trainer and a validation-based layer search.

Every probe detector trains through `train_mlp` so seeds, class weights, early stopping / checkpointing and the
device (CUDA when present, else CPU) behave the same everywhere. Choices of epoch, layer or threshold use a
held-out set the caller passes (the run's validation view); the test view is never seen here.

A package-private helper module of `haldet.detectors` (the leading underscore keeps the detector registry from
scanning it), imported by the probe detectors.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.integrate import trapezoid
from torch import nn

from haldet.detectors.base import Detector, Scores
from haldet.signals import Signal, SignalView

MIN_TRAIN = 10  # fewer valid training items than this: the probe is not fitted (scores NaN with a reason)

# a probe's `pooling` parameter -> the pooled hidden states it reads (`features.pooling`, `features.select_tokens`)
POOLED_SIGNALS = {"last": Signal.HIDDEN_LAST, "mean": Signal.HIDDEN_MEAN, "first_n": Signal.HIDDEN_FIRST_N,
                  "last_n": Signal.HIDDEN_LAST_N}


def pooled_signal(detector: str, pooling: str) -> Signal:
    """The signal a probe's `pooling` parameter selects; an unknown value is an error naming the choices."""
    if pooling not in POOLED_SIGNALS:
        raise ValueError(f"detector {detector!r}: pooling must be one of {', '.join(POOLED_SIGNALS)}, "
                         f"not {pooling!r}")
    return POOLED_SIGNALS[pooling]


def unfitted_scores(n: int, problem: str) -> Scores:
    """Every item invalid, with why the probe could not be fitted."""
    out = Scores.empty(n)
    for i in range(n):
        out.invalid(i, f"probe not fitted: {problem}")
    return out


def probe_scores(n: int, problem: str | None, features: Callable[[], tuple[np.ndarray, np.ndarray, list[str]]],
                 predict: Callable[[np.ndarray], np.ndarray]) -> Scores:
    """Scores of a fitted probe: every item invalid when the probe could not be fitted; otherwise `predict` on the
    items with valid features, the others invalid with their reason (and a non-finite output is invalid too)."""
    if problem is not None:
        return unfitted_scores(n, problem)
    out = Scores.empty(n)
    X, ok, reasons = features()
    for i, reason in enumerate(reasons):
        if not ok[i]:
            out.invalid(i, reason)
    if ok.any():
        for j, v in zip(np.flatnonzero(ok), predict(X[ok]), strict=True):
            if np.isfinite(v):
                out.set(int(j), float(v))
            else:
                out.invalid(int(j), "non-finite probe output")
    return out


def training_problem(y: np.ndarray | None, what: str = "training items") -> str | None:
    """Why a (valid-item) label vector cannot train a probe, or None when it can."""
    if y is None:
        return f"no labels on the {what}"
    y = np.asarray(y)
    if len(y) < MIN_TRAIN:
        return f"only {len(y)} valid {what} (need at least {MIN_TRAIN})"
    if len(np.unique(y)) < 2:
        return f"{what} hold a single class ({int(y[0]) if len(y) else '-'})"
    return None


def has_both_classes(y: np.ndarray | None) -> bool:
    return y is not None and len(y) > 0 and len(np.unique(y)) == 2


def safe_auroc(y: np.ndarray, s: np.ndarray) -> float:
    """AUROC on finite scores; NaN when one class is missing (callers then fall back to a default).
    Layer, k and threshold searches call this hundreds of times per fit: see `binary_auroc`."""
    y, s = np.asarray(y), np.asarray(s, dtype=np.float64)
    ok = np.isfinite(s)
    if not has_both_classes(y[ok]):
        return float("nan")
    return binary_auroc(y[ok], s[ok])


def binary_auroc(y: np.ndarray, s: np.ndarray) -> float:
    """scikit-learn's `roc_auc_score` for two label values (the larger positive) and finite float64 scores, by the
    same operations in the same order (ROC points at distinct thresholds, collinear points dropped, the origin
    prepended, trapezoid area), so the value is the same float: searches compare AUROCs with `>`, and a tie broken
    by the last bit must be broken the same way. Without sklearn's input validation it is ~50x faster on the
    tens of items of a validation view. `tests/test_detectors_whitebox.py` checks equality on tied data."""
    positive = np.unique(y)[1]
    order = np.argsort(s, kind="stable")[::-1]  # descending; the order within a tie changes no ROC point
    score = s[order]
    thresholds = np.r_[np.flatnonzero(np.diff(score)), len(score) - 1]
    tps = np.cumsum((y[order] == positive).astype(np.float64))[thresholds]
    fps = 1 + thresholds.astype(np.float64) - tps
    if fps.shape[0] > 2:
        keep = np.flatnonzero(np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True])
        fps, tps = fps[keep], tps[keep]
    fps, tps = np.r_[0.0, fps], np.r_[0.0, tps]
    return float(trapezoid(tps / tps[-1], fps / fps[-1]))  # sklearn's own trapezoid (scipy's)


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def layer_row(n_rows: int, layer: int) -> int:
    """A layer index (negative counts from the end, as in Python) checked against the stored rows."""
    idx = layer if layer >= 0 else n_rows + layer
    if not 0 <= idx < n_rows:
        raise ValueError(f"layer {layer} is out of range for features with {n_rows} layer rows")
    return idx


def stack(values: Sequence[Any], extract: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray,
                                                                                     list[str]]:
    """Per-item signal values -> (X float64 [N, F], valid mask [N], reason per item).

    An item is invalid when its signal is missing (None) or its extracted feature has a non-finite entry.
    Invalid rows of X are zeros and must not be used.
    """
    rows: list[np.ndarray | None] = []
    reasons: list[str] = []
    for value in values:
        if value is None:
            rows.append(None)
            reasons.append("feature missing for this item")
            continue
        feat = np.asarray(extract(np.asarray(value)), dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(feat)):
            rows.append(None)
            reasons.append("non-finite feature values")
            continue
        rows.append(feat)
        reasons.append("")
    width = next((r.shape[0] for r in rows if r is not None), 0)
    X = np.zeros((len(rows), width), dtype=np.float64)
    valid = np.zeros(len(rows), dtype=bool)
    for i, r in enumerate(rows):
        if r is None:
            continue
        if r.shape[0] != width:
            reasons[i] = f"feature width {r.shape[0]} differs from {width}"
            continue
        X[i], valid[i] = r, True
    return X, valid, reasons


@dataclass
class Standardizer:
    """Per-feature z-scoring fitted on train only (constant features keep scale 1)."""

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray) -> Standardizer:
        mean = X.mean(axis=0)
        scale = X.std(axis=0)
        scale[scale < 1e-8] = 1.0
        return cls(mean=mean, scale=scale)

    def transform(self, X: np.ndarray) -> np.ndarray:
        return (X - self.mean) / self.scale


class MLP(nn.Module):
    """Input dropout -> [Linear -> ReLU]* -> Linear to 1 logit (sigmoid) or 2 logits (softmax)."""

    def __init__(self, d_in: int, hidden: Sequence[int], n_out: int, input_dropout: float) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Dropout(input_dropout)] if input_dropout > 0 else []
        width = d_in
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass
class TrainedMLP:
    """A fitted MLP kept as a CPU state dict (picklable, device-independent) plus how it was trained."""

    d_in: int
    hidden: tuple[int, ...]
    n_out: int
    input_dropout: float
    state: dict[str, torch.Tensor]
    info: dict[str, Any] = field(default_factory=dict)

    def module(self, device: torch.device | None = None) -> MLP:
        net = MLP(self.d_in, self.hidden, self.n_out, self.input_dropout)
        net.load_state_dict(self.state)
        return net.to(device or torch.device("cpu")).eval()

    def predict(self, X: np.ndarray, device: str = "auto") -> np.ndarray:
        """P(class 1 = hallucination) per row. Each row runs as its own batch of one in a fresh tensor: BLAS kernels
        may round a row by its position in a batch (MKL's AVX-512 ones do), and an item's score must not depend on
        the items scored with it (tests/test_conformance_isa.py)."""
        if len(X) == 0:
            return np.zeros(0)
        dev = resolve_device(device)
        net = self.module(dev)
        p = np.empty(len(X))
        with torch.no_grad():
            for i, row in enumerate(np.asarray(X, dtype=np.float32)):
                out = net(torch.tensor(row[None], device=dev))
                p[i] = float(torch.sigmoid(out[0, 0]) if self.n_out == 1 else torch.softmax(out, dim=1)[0, 1])
        return p


def _loss_fn(n_out: int, y: np.ndarray, class_weight: bool, device: torch.device) -> nn.Module:
    """BCE (1 logit) or CE (2 logits); with `class_weight` each class is weighted n / (2 n_c) ("balanced")."""
    counts = np.bincount(y.astype(int), minlength=2).astype(np.float64)
    w = (len(y) / (2.0 * np.maximum(counts, 1))) if class_weight else np.ones(2)
    if n_out == 1:
        return nn.BCEWithLogitsLoss(pos_weight=torch.tensor(w[1] / w[0], dtype=torch.float32, device=device))
    return nn.CrossEntropyLoss(weight=torch.tensor(w, dtype=torch.float32, device=device))


def _val_score(metric: str, y: np.ndarray, p: np.ndarray) -> float:
    """Higher is better: negative log-loss, accuracy or AUROC on the held-out set."""
    if metric == "loss":
        q = np.clip(p, 1e-7, 1 - 1e-7)
        return float(np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))
    if metric == "accuracy":
        return float(np.mean((p > 0.5) == (y == 1)))
    if metric == "auroc":
        value = safe_auroc(y, p)
        return value if np.isfinite(value) else 0.5
    raise ValueError(f"unknown validation metric {metric!r} (loss, accuracy, auroc)")


@contextmanager
def small_model_threads(device: torch.device) -> Iterator[None]:
    """Small probes train faster on one CPU thread than on many (thread start-up dominates tiny matmuls, and a
    shared machine makes it worse); the previous setting is restored afterwards."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_mlp(X: np.ndarray, y: np.ndarray, *, hidden: Sequence[int], n_out: int = 1, input_dropout: float = 0.0,
              epochs: int = 20, batch_size: int = 32, lr: float = 1e-3, weight_decay: float = 0.0,
              class_weight: bool = False, seed: int = 42, val: tuple[np.ndarray, np.ndarray] | None = None,
              select: str | None = None, patience: int | None = None, tol: float = 1e-4,
              optimizer: str = "adam", device: str = "auto") -> TrainedMLP:
    """Adam on mini-batches, seeded (init and shuffling). With `val` and `select` the checkpoint with the best
    held-out score is kept; with `patience` as well, training stops after that many epochs without an
    improvement larger than `tol` (sklearn-style early stopping). Without them the last epoch is kept.
    `optimizer="sgd_cosine"`: SGD with momentum 0.9 and a per-epoch cosine decay to lr * 0.2^3 (HaloScope's
    source classifier)."""
    dev = resolve_device(device)
    with small_model_threads(dev):
        return _train(X, y, hidden=hidden, n_out=n_out, input_dropout=input_dropout, epochs=epochs,
                      batch_size=batch_size, lr=lr, weight_decay=weight_decay, class_weight=class_weight, seed=seed,
                      val=val, select=select, patience=patience, tol=tol, optimizer=optimizer, dev=dev)


def _train(X: np.ndarray, y: np.ndarray, *, hidden: Sequence[int], n_out: int, input_dropout: float, epochs: int,
           batch_size: int, lr: float, weight_decay: float, class_weight: bool, seed: int,
           val: tuple[np.ndarray, np.ndarray] | None, select: str | None, patience: int | None, tol: float,
           optimizer: str, dev: torch.device) -> TrainedMLP:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    net = MLP(X.shape[1], hidden, n_out, input_dropout).to(dev)
    sched: torch.optim.lr_scheduler.LRScheduler | None = None
    if optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    elif optimizer == "sgd_cosine":
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs), eta_min=lr * 0.2 ** 3)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r} (adam, sgd_cosine)")
    loss_fn = _loss_fn(n_out, y, class_weight, dev)
    xt = torch.as_tensor(X, dtype=torch.float32, device=dev)
    yt = torch.as_tensor(y, dtype=torch.float32 if n_out == 1 else torch.long, device=dev)
    use_val = val is not None and select is not None and len(val[1]) > 0
    xv = torch.as_tensor(val[0], dtype=torch.float32, device=dev) if use_val and val is not None else None
    best_score, best_state, best_epoch, stale, ran = -np.inf, None, 0, 0, 0
    for epoch in range(1, epochs + 1):
        net.train()
        order = torch.randperm(len(xt), generator=gen).to(dev)
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            out = net(xt[batch])
            loss = loss_fn(out[:, 0], yt[batch]) if n_out == 1 else loss_fn(out, yt[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
        ran = epoch
        if sched is not None:
            sched.step()
        if xv is None or val is None or select is None:
            continue
        net.eval()
        with torch.no_grad():
            out = net(xv)
            p = (torch.sigmoid(out[:, 0]) if n_out == 1 else torch.softmax(out, dim=1)[:, 1]).double().cpu().numpy()
        score = _val_score(select, val[1], p)
        if score > best_score + tol:
            best_score, best_epoch, stale = score, epoch, 0
            best_state = copy.deepcopy({k: v.detach().cpu() for k, v in net.state_dict().items()})
        else:
            stale += 1
            if patience is not None and stale >= patience:
                break
    state = best_state if best_state is not None else {k: v.detach().cpu() for k, v in net.state_dict().items()}
    info: dict[str, Any] = {"epochs_run": ran, "device": str(dev)}
    if best_state is not None:
        info.update({"best_epoch": best_epoch, f"val_{select}": round(float(best_score), 6)})
    return TrainedMLP(d_in=X.shape[1], hidden=tuple(hidden), n_out=n_out, input_dropout=input_dropout,
                      state=state, info=info)


def internal_split(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (train_idx, held_idx) of the training items, for probes that checkpoint inside train."""
    rng = np.random.default_rng(seed)
    held: list[int] = []
    for cls in (0, 1):
        idx = np.flatnonzero(y == cls)
        rng.shuffle(idx)
        held += idx[:max(1, round(fraction * len(idx)))].tolist() if len(idx) > 1 else []
    mask = np.zeros(len(y), dtype=bool)
    mask[held] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


class ProbeDetector(Detector):
    """A supervised probe on one feature vector per item: standardise on train, train an MLP, score
    P(hallucination). Subclasses define `extract` (the item's feature at a layer) and `train_model`.

    `layer` is an int (negative from the end) or "val": then every stored layer is tried and the one with the
    best validation AUROC is kept (validation labels only). Checkpoint/early-stopping data: the validation view
    (`checkpoint_on="val"`) or an internal split of train (`"internal"`, as some papers do); when the validation
    view lacks a class, the internal split is used and recorded in `fit_info`.
    """

    trains = True
    signal: ClassVar[Signal]  # the signal whose per-item array holds the layer rows

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.problem: str | None = "not fitted"
        self.fit_info: dict[str, Any] = {}
        self.layer: int = -1
        self.scaler: Standardizer | None = None
        self.model: TrainedMLP | None = None

    # -- hooks ---------------------------------------------------------------------------------------------
    def extract(self, value: np.ndarray, layer: int) -> np.ndarray:
        raise NotImplementedError

    def train_model(self, X: np.ndarray, y: np.ndarray, val: tuple[np.ndarray, np.ndarray] | None) -> TrainedMLP:
        raise NotImplementedError

    def train_labels(self, train: SignalView) -> tuple[np.ndarray | None, str]:
        """Training targets (1 = hallucination) and where they come from."""
        return train.labels, "train labels"

    # -- shared flow ---------------------------------------------------------------------------------------
    def features(self, view: SignalView, layer: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
        values = view.get(self.signal)
        first = next((np.asarray(v) for v in values if v is not None), None)
        if first is None:
            return stack(values, lambda v: v)
        row = layer_row(self.n_layer_rows(first), layer)
        return stack(values, lambda v: self.extract(v, row))

    def n_layer_rows(self, value: np.ndarray) -> int:
        return int(value.shape[0])

    def candidate_layers(self, view: SignalView) -> list[int]:
        if self.params.get("layer", -1) != "val":
            return [int(self.params.get("layer", -1))]
        first = next((np.asarray(v) for v in view.get(self.signal) if v is not None), None)
        return [-1] if first is None else list(range(self.n_layer_rows(first)))

    def _checkpoint_data(self, X: np.ndarray, y: np.ndarray, val_X: np.ndarray | None,
                         val_y: np.ndarray | None
                         ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        mode = self.params.get("checkpoint_on", "val")
        if mode == "none":  # fixed epoch count, last epoch kept (the paper's setting for MIND and ICR)
            return X, y, None
        if mode not in ("val", "internal"):
            raise ValueError(f"checkpoint_on must be 'val', 'internal' or 'none', not {mode!r}")
        if mode == "val" and val_X is not None and has_both_classes(val_y):
            assert val_y is not None
            self.fit_info["checkpoint_on"] = "validation view"
            return X, y, (val_X, val_y)
        tr, held = internal_split(y, self.params.get("internal_fraction", 0.2), self.params.get("split_seed", 0))
        if mode == "val":
            self.fit_info["checkpoint_fallback"] = "validation view lacks a class"
        self.fit_info["checkpoint_on"] = f"internal {len(tr)}/{len(held)} split of train"
        return X[tr], y[tr], (X[held], y[held])

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self.problem, self.fit_info = None, {}
        labels, source = self.train_labels(train)
        self.fit_info["targets"] = source
        best: tuple[float, int, Standardizer, TrainedMLP] | None = None
        layers = self.candidate_layers(train)
        for layer in layers:
            X, ok, _ = self.features(train, layer)
            y = None if labels is None else np.asarray(labels, dtype=np.float64)
            keep = ok if y is None else ok & np.isfinite(y)
            problem = training_problem(None if y is None else y[keep].astype(int))
            if problem is not None:
                self.problem = problem
                return
            assert y is not None
            Xtr, ytr = X[keep], y[keep].astype(int)
            scaler = Standardizer.fit(Xtr) if self.params.get("standardize", True) else \
                Standardizer(np.zeros(Xtr.shape[1]), np.ones(Xtr.shape[1]))
            val_X = val_y = None
            if val is not None and val.labels is not None and len(val):
                Xv, okv, _ = self.features(val, layer)
                val_X, val_y = scaler.transform(Xv[okv]), np.asarray(val.labels)[okv].astype(int)
            fit_X, fit_y, held = self._checkpoint_data(scaler.transform(Xtr), ytr, val_X, val_y)
            if training_problem(fit_y) is not None:  # internal split left too little: train on all of train
                fit_X, fit_y = scaler.transform(Xtr), ytr
            model = self.train_model(fit_X, fit_y, held)
            if len(layers) == 1:
                best = (0.0, layer, scaler, model)
                break
            if val_X is None or not has_both_classes(val_y):
                self.problem = "layer='val' needs validation labels of both classes"
                return
            assert val_y is not None
            auc = safe_auroc(val_y, model.predict(val_X, self.params.get("device", "auto")))
            self.fit_info.setdefault("val_auroc_by_layer", {})[layer] = round(auc, 4)
            if best is None or auc > best[0]:
                best = (auc, layer, scaler, model)
        assert best is not None
        _, self.layer, self.scaler, self.model = best
        self.fit_info.update({"layer": self.layer, "n_train": len(ytr), **self.model.info})

    def score(self, items: SignalView) -> Scores:
        self.meta["fit"] = {**self.fit_info, "problem": self.problem}
        model, scaler = self.model, self.scaler
        if model is None or scaler is None:
            return unfitted_scores(len(items), self.problem or "no fitted state")
        return probe_scores(len(items), self.problem, lambda: self.features(items, self.layer),
                            lambda X: model.predict(scaler.transform(X), self.params.get("device", "auto")))
