"""How every white-box probe trains: the training-set checks, standardisation, validation AUROC (the same float as
scikit-learn's), an internal stratified split, and one seeded torch MLP trainer (`train_mlp`), so seeds, class
weights, early stopping / checkpointing and the device (CUDA when present, else CPU) behave the same everywhere.
"""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.integrate import trapezoid
from torch import nn

from haldet.util.threads import available_cores

MIN_TRAIN = 10  # fewer valid training items than this: the probe is not fitted (scores NaN with a reason)


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
    tens of items of a validation view. `tests/detectors/test_detectors_whitebox.py` checks equality on tied data."""
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
        the items scored with it (tests/testing/test_conformance_isa.py)."""
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


_SEEDED_INIT = threading.Lock()  # torch's global generator draws a network's initial weights: one seeding at a time


def train_mlps(X: np.ndarray, labels: Sequence[np.ndarray], **settings: Any) -> list[TrainedMLP]:
    """`train_mlp(X, y, **settings)` for each label vector in `labels`, in order (HaloScope's pseudo-labellings of
    the same features). On CPU without dropout the trainings run side by side on the cores this process may use,
    each as `train_mlp` runs it: one intra-op thread, the seeded initial weights drawn under a lock from torch's
    global generator, the shuffling from its own generator. Nothing else draws from a shared generator, so each
    model is bit-identical to training them one after another (tests/detectors/test_probe_training_parallel.py)."""
    full = {name: p.default for name, p in inspect.signature(train_mlp).parameters.items()
            if p.kind is p.KEYWORD_ONLY} | settings
    dev = resolve_device(full.pop("device"))
    workers = min(len(labels), available_cores())
    if workers < 2 or dev.type != "cpu" or full["input_dropout"] > 0:
        return [train_mlp(X, y, device=str(dev), **full) for y in labels]
    with small_model_threads(dev), ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda y: _train(X, y, dev=dev, init_lock=_SEEDED_INIT, **full), labels))


def _train(X: np.ndarray, y: np.ndarray, *, hidden: Sequence[int], n_out: int, input_dropout: float, epochs: int,
           batch_size: int, lr: float, weight_decay: float, class_weight: bool, seed: int,
           val: tuple[np.ndarray, np.ndarray] | None, select: str | None, patience: int | None, tol: float,
           optimizer: str, dev: torch.device, init_lock: threading.Lock | None = None) -> TrainedMLP:
    with init_lock or nullcontext():
        torch.manual_seed(seed)
        net = MLP(X.shape[1], hidden, n_out, input_dropout).to(dev)
    gen = torch.Generator().manual_seed(seed)
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
