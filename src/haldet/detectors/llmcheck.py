"""LLM-Check (Sriramanan et al. 2024), the white-box baselines of VeriGray's Table 4, on the proxy model's one
teacher-forced pass (`haldet.backends.hf.llmcheck` has the formulas):

- `llmcheck_hidden`: hidden score of a unit = mean log eigenvalue of the covariance of its tokens' hidden states at
  one layer (`Signal.UNIT_HIDDEN_SCORES`, computed in the pass for every unit of the item and the whole answer);
- `llmcheck_attention`: attention score = per token, sum over heads of log A[t, t] at one layer
  (`Signal.TOKEN_ATTN_LOGDIAG`), averaged over the unit's tokens.

The method fixes neither the layer nor which direction means "hallucinated", so both are learned: the layer and
sign with the best AUROC on the validation units with a binary label (on training units when validation cannot
decide; `meta` says which), or the configured `layer` with its sign learned the same way. Scores are the signed
values at that layer.

Fixed thresholds (VeriGray's appendix D: Llama-2-7B, Hidden Score 6.3 at layer 20, Attn Score -174.0 at layer 21):
`threshold` is a value on the raw score scale; the detector then gives its own binary verdict (`decision_threshold`
= sign * threshold on the signed score, read by the VeriGray suite) instead of a threshold from validation. Which
side is hallucinated is learned as above (`direction: learned`), or fixed with `direction: above` (raw > threshold)
or `below` (raw < threshold), which needs a fixed `layer` and then learns nothing from labels.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.backends.hf.llmcheck import choose_layer
from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.unit import UnitDetector, UnitScores, unit_token_index
from haldet.schema import LEVELS
from haldet.signals import Signal, SignalView

DIRECTIONS = {"learned": None, "above": 1.0, "below": -1.0}


def check_choice_params(name: str, params: dict[str, Any]) -> None:
    """One clear error for a bad direction / threshold combination (at construction, before any work)."""
    if params["direction"] not in DIRECTIONS:
        raise ValueError(f"{name}: direction must be one of {', '.join(DIRECTIONS)}, not {params['direction']!r}")
    if params["direction"] != "learned" and params["layer"] is None:
        raise ValueError(f"{name}: direction {params['direction']!r} needs a fixed layer (set `layer`)")
    threshold = params["threshold"]
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int | float)):
        raise ValueError(f"{name}: threshold must be a number on the raw score scale or null, not {threshold!r}")


class _LayerChoice:
    """Learns (layer, sign) from labelled views; subclasses give per-item [layers, units + 1] score tables."""

    layer: int | None = None
    sign: float = 1.0
    choice_note: str = "not fitted"
    params: dict[str, Any]
    meta: dict[str, Any]

    def tables(self, items: SignalView) -> list[np.ndarray | None]:
        raise NotImplementedError

    def _labelled(self, view: SignalView | None) -> tuple[np.ndarray, np.ndarray]:
        """Rows of per-layer scores and their binary labels: every labelled unit, else the response."""
        xs: list[np.ndarray] = []
        ys: list[int] = []
        if view is None or len(view) == 0:
            return np.zeros((0, 0)), np.zeros(0)
        for k, (inst, table) in enumerate(zip(view.instances, self.tables(view), strict=True)):
            if table is None:
                continue
            labelled = [(u, unit.binary) for u, unit in enumerate(inst.units) if unit.binary is not None]
            if labelled:
                xs += [table[:, u] for u, _ in labelled]
                ys += [int(b) for _, b in labelled if b is not None]
            elif view.labels is not None and view.labels[k] >= 0:
                xs.append(table[:, -1])
                ys.append(int(view.labels[k]))
        if not xs:
            return np.zeros((0, 0)), np.zeros(0)
        return np.stack(xs), np.asarray(ys)

    @property
    def decision_threshold(self) -> float | None:
        """The fixed raw-scale threshold on the signed score (hallucinated when score > it), or None."""
        threshold = self.params.get("threshold")
        return None if threshold is None else self.sign * float(threshold)

    def fit(self, train: SignalView, val: SignalView | None) -> None:
        fixed: Any = self.params.get("layer")  # an int when `direction` is fixed (checked when the detector is built)
        direction = DIRECTIONS[self.params.get("direction", "learned")]
        if direction is not None:
            self.layer, self.sign = int(fixed), direction
            self.choice_note = (f"layer {self.layer}, sign {int(self.sign):+d} fixed: hallucinated when the raw "
                                f"score is {self.params['direction']} the threshold")
            self.meta["layer_choice"] = self.choice_note
            return
        for name, view in (("validation", val), ("training", train)):
            x, y = self._labelled(view)
            if not len(y):
                continue
            if fixed is not None:
                x = x[:, [int(fixed)]]
            layer, sign, auc = choose_layer(x, y)
            if layer >= 0:
                self.layer = int(fixed) if fixed is not None else layer
                self.sign = sign
                self.choice_note = f"layer {self.layer}, sign {sign:+.0f} from {name} units (AUROC {auc:.3f})"
                self.meta["layer_choice"] = self.choice_note
                return
        self.layer = None
        self.choice_note = "no layer chosen: neither validation nor training units hold both classes with scores"
        self.meta["layer_choice"] = self.choice_note

    def signed(self, table: np.ndarray | None, columns: list[int]) -> tuple[np.ndarray, str]:
        if self.layer is None:
            return np.full(len(columns), np.nan), self.choice_note
        if table is None:
            return np.full(len(columns), np.nan), "no LLM-Check evidence for this item"
        if self.layer >= table.shape[0]:
            return np.full(len(columns), np.nan), f"layer {self.layer} is not in the evidence ({table.shape[0]})"
        return self.sign * np.asarray(table[self.layer, columns], dtype=np.float64), ""


@register("llmcheck_hidden")
class LLMCheckHidden(_LayerChoice, Detector):
    """Hidden score at the chosen layer (see the module docstring)."""
    method_family = "internal states"
    paper = "Sriramanan et al. 2024, LLM-Check: investigating detection of hallucinations in LLMs"
    peers = ()

    version = "1"
    trains = True
    requires = frozenset({Signal.UNIT_HIDDEN_SCORES})
    levels: ClassVar[tuple[str, ...]] = LEVELS
    defaults: ClassVar[dict[str, Any]] = {"layer": None, "threshold": None, "direction": "learned"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        check_choice_params(self.name, self.params)

    def tables(self, items: SignalView) -> list[np.ndarray | None]:
        return [None if t is None else np.asarray(t, dtype=np.float64) for t in items.get(Signal.UNIT_HIDDEN_SCORES)]

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        for i, table in enumerate(self.tables(items)):
            value, why = self.signed(table, [-1])
            out.set(i, float(value[0])) if np.isfinite(value[0]) else out.invalid(i, why or "no tokens")
        return out

    def score_units(self, items: SignalView, level: str) -> UnitScores:
        if level == "response":
            flat = self.score(items)
            return UnitScores([flat.values[i : i + 1] for i in range(len(items))], [[r] for r in flat.reasons])
        values, reasons = [], []
        for inst, table in zip(items.instances, self.tables(items), strict=True):
            columns = [k for k, u in enumerate(inst.units) if u.kind == level]
            if table is not None and table.shape[1] != len(inst.units) + 1:
                vals, why = np.full(len(columns), np.nan), "evidence columns do not match the item's units"
            else:
                vals, why = self.signed(table, columns)
            values.append(vals)
            reasons.append([why or ("" if np.isfinite(v) else "no token overlaps this unit") for v in vals])
        return UnitScores(values, reasons)


@register("llmcheck_attention")
class LLMCheckAttention(_LayerChoice, UnitDetector):
    """Attention score at the chosen layer, averaged over each unit's tokens (see the module docstring)."""
    method_family = "attention"
    paper = "Sriramanan et al. 2024, LLM-Check: investigating detection of hallucinations in LLMs"
    peers = ("lm-polygraph", "TruthTorchLM")

    version = "1"
    trains = True
    requires = UnitDetector.requires | {Signal.TOKEN_ATTN_LOGDIAG}
    defaults: ClassVar[dict[str, Any]] = {"layer": None, "aggregate": "mean", "threshold": None,
                                          "direction": "learned"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        check_choice_params(self.name, self.params)

    def tables(self, items: SignalView) -> list[np.ndarray | None]:
        """Per item [L, units + 1]: the mean log-diagonal over each unit's tokens, then over the whole answer."""
        out: list[np.ndarray | None] = []
        for inst, diag, offs in zip(items.instances, items.get(Signal.TOKEN_ATTN_LOGDIAG),
                                    items.get(Signal.TOKEN_OFFSETS), strict=True):
            if diag is None or offs is None or np.asarray(diag).shape[1] != len(offs):
                out.append(None)
                continue
            diag = np.asarray(diag, dtype=np.float64)
            index = [*unit_token_index(offs, list(inst.units)), np.arange(diag.shape[1])]
            out.append(np.stack([diag[:, ix].mean(axis=1) if len(ix) else np.full(diag.shape[0], np.nan)
                                 for ix in index], axis=1))
        return out

    def token_scores(self, items: SignalView) -> list[np.ndarray | str]:
        out: list[np.ndarray | str] = []
        for diag in items.get(Signal.TOKEN_ATTN_LOGDIAG):
            if self.layer is None:
                out.append(self.choice_note)
            elif diag is None:
                out.append("no LLM-Check evidence for this item")
            else:
                out.append(self.sign * np.asarray(diag, dtype=np.float64)[self.layer])
        return out
