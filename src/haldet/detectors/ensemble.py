"""Ensemble: one score from the scores of other detectors of the same cell (TruthTorchLM / uqlm style, under haldet's
protocol).

The members are ordinary registered detectors, built from the `members` parameter (and `member_params`), fitted and
scored through this detector on the views the scoring path hands it, so the ensemble reads exactly the union of its
members' signals (`signals()`), is fitted on train (choices on validation) only, and is cached and evaluated like any
detector. Variants:

- `logistic`: a logistic regression on the members' standardised scores (mean and spread of the fit set); the score
  is its log-odds. The weights are learned from the fit set's labels, so a member oriented the wrong way gets a
  negative weight there, never from test labels.
- `rank`: the mean of each member's empirical CDF over the fit set (equal weights; no labels used beyond fitting
  the members): robust to scale, no weights to overfit.

The fit set is the train split; when a member is itself trained, its train scores are in-sample (a probe scores
its own training data near perfectly), so the combiner is fitted on validation instead (recorded in `meta`).
An item any member cannot score is NaN with that member's reason: never imputed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import DETECTORS, Detector, Scores, register
from haldet.signals import Signal, SignalView

DEFAULT_MEMBERS = ("perplexity", "verbalized")


@register("ensemble")
class Ensemble(Detector):
    """Combination of member detectors' scores (logistic regression on standardised scores, or a rank average)."""
    method_family = "ensemble"
    paper = "stacking of detector scores (logistic regression or mean rank), haldet's own"
    peers = ("uqlm",)

    # the default members' signals (an instance with other members reads theirs: `signals()`); a test keeps
    # this equal to the union of the default members' declarations
    requires = frozenset({Signal.TOKEN_LOGPROBS, Signal.VERBALIZED})
    trains = True
    version = "1"
    variants: ClassVar[dict[str, str]] = {
        "logistic": "logistic regression on the members' standardised scores (log-odds)",
        "rank": "mean of the members' empirical CDFs over the fit set",
    }
    defaults: ClassVar[dict[str, Any]] = {"variant": "logistic", "members": list(DEFAULT_MEMBERS),
                                          "member_params": {}, "C": 1.0}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        names = list(self.params["members"])
        if len(names) < 2 or len(set(names)) != len(names):
            raise ValueError(f"ensemble members must be two or more distinct detectors, got {names}")
        unknown = set(self.params["member_params"]) - set(names)
        if unknown:
            raise ValueError(f"ensemble member_params name detectors that are not members: {sorted(unknown)}")
        self.members: list[Detector] = []
        for name in names:
            cls = DETECTORS.get(name, where="detector_params.ensemble.members")
            if cls is Ensemble or issubclass(cls, Ensemble):
                raise ValueError("an ensemble cannot be a member of an ensemble")
            self.members.append(cls(**self.params["member_params"].get(name, {})))
        self.center: np.ndarray | None = None
        self.spread: np.ndarray | None = None
        self.weights: np.ndarray | None = None
        self.intercept: float = 0.0
        self.reference: list[np.ndarray] = []  # rank variant: each member's sorted fit-set scores

    def signals(self) -> frozenset[Signal]:
        return frozenset().union(*(m.signals() for m in self.members))

    def identity(self) -> dict[str, Any]:
        """The ensemble's own identity plus each member's (version, params, auxiliary models); the members'
        auxiliary models also appear under `models` as `<member>.<param>` so a substitute model is named."""
        out = super().identity()
        out["members"] = [m.identity() for m in self.members]
        out["models"] = {**out["models"], **{f"{m['detector']}.{k}": v for m in out["members"]
                                             for k, v in m["models"].items()}}
        return out

    # ------------------------------------------------------------------------------------------------ fitting
    def _prepare_members(self) -> None:
        for m in self.members:
            m.workdir, m.progress = self.workdir, self.progress

    def _member_scores(self, items: SignalView) -> tuple[np.ndarray, list[str]]:
        """[n, members] scores and, per item, the reason it cannot be combined ('' when every member scored it)."""
        cols, reasons = [], [""] * len(items)
        for m in self.members:
            s = m.score(items)
            cols.append(s.values)
            for i, (v, why) in enumerate(zip(s.values, s.reasons, strict=True)):
                if not np.isfinite(v) and not reasons[i]:
                    reasons[i] = f"member {m.name}: {why or 'no score'}"
        return np.column_stack(cols) if cols else np.empty((len(items), 0)), reasons

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        self._prepare_members()
        for m in self.members:
            if m.trains:
                m.fit(train, val)
        in_sample = any(m.trains for m in self.members)
        fit_view = val if in_sample and val is not None and len(val) else train
        x, _ = self._member_scores(fit_view)
        y = np.asarray(fit_view.labels, dtype=int)
        ok = np.isfinite(x).all(axis=1)
        x, y = x[ok], y[ok]
        if len(set(y.tolist())) < 2:
            raise ValueError(f"ensemble: the fit set has {int(y.sum())} hallucinated of {len(y)} items every "
                             "member scored; both classes are needed")
        self.center, self.spread = x.mean(axis=0), x.std(axis=0)
        self.spread[self.spread == 0] = 1.0
        names = [m.name for m in self.members]
        if self.params["variant"] == "logistic":
            from sklearn.linear_model import LogisticRegression

            model = LogisticRegression(C=float(self.params["C"])).fit((x - self.center) / self.spread, y)
            self.weights, self.intercept = model.coef_[0].astype(np.float64), float(model.intercept_[0])
        else:
            self.weights = np.full(len(names), 1.0 / len(names))
            self.reference = [np.sort(x[:, j]) for j in range(x.shape[1])]
        self.meta["ensemble"] = {
            "variant": self.params["variant"], "members": names,
            "weights": {n: round(float(w), 6) for n, w in zip(names, self.weights, strict=True)},
            "intercept": round(self.intercept, 6), "fitted_on": "val" if fit_view is val else "train",
            "n_fit": len(y),
        }

    # ------------------------------------------------------------------------------------------------ scoring
    def score(self, items: SignalView) -> Scores:
        if self.weights is None:
            raise RuntimeError("ensemble: score() before fit()")
        self._prepare_members()
        x, reasons = self._member_scores(items)
        out = Scores.empty(len(items))
        ok = np.isfinite(x).all(axis=1)
        if self.params["variant"] == "logistic":
            combined = ((x - self.center) / self.spread) @ self.weights + self.intercept
        else:
            cdf = [np.searchsorted(ref, x[:, j], side="right") / len(ref) for j, ref in enumerate(self.reference)]
            combined = np.mean(cdf, axis=0)
        member_meta = {m.name: m.meta for m in self.members if m.meta}
        if member_meta:  # models the members loaded (the scoring path checks them against the identity)
            self.meta["members"] = member_meta
        for i in range(len(items)):
            if ok[i]:
                out.set(i, float(combined[i]))
            else:
                out.invalid(i, reasons[i])
        return out

    # ------------------------------------------------------------------------------------------------ state
    def save(self, path: Path) -> None:
        """The combiner and each member's fitted state (attributes without those the scoring path sets)."""
        import torch

        from haldet.store import atomic_path  # lazy: h5py

        state = {k: v for k, v in self.__dict__.items() if k not in self._UNSAVED and k != "members"}
        state["member_states"] = [{k: v for k, v in m.__dict__.items() if k not in m._UNSAVED} for m in self.members]
        with atomic_path(path) as tmp:
            torch.save(state, tmp)

    def load(self, path: Path) -> None:
        import torch

        state = torch.load(path, map_location="cpu", weights_only=False)
        for m, saved in zip(self.members, state.pop("member_states"), strict=True):
            m.__dict__.update(saved)
        self.__dict__.update(state)
