"""Focus (Zhang et al., 2023; HalluEntity section 4): token uncertainty focused on keywords, corrected by IDF and
propagated along attention.

For answer token i with model distribution p(. | x_<i):
    p_hat(v) = p(v) idf(v) / sum_u p(u) idf(u), over tokens with p >= `p_threshold` (the others are zeroed)
    h_i      = -ln(p_hat(x_i) + 1e-10) + 2 ** H_2(p_hat)               (IDF-corrected NLL + perplexity in bits)
    u_i      = h_i + gamma * sum_{j<i} w_ij u_j   for keywords (w_ij = att_ij / sum_{k<i} att_ik), u_i = h_i else
    y_i      = 1[x_i in K] * u_i
K = tokens overlapping a spaCy word that is a noun, proper noun or numeral or lies in a named entity; att = the
answer-to-answer attention, max over layers and heads (`Signal.TOKEN_ATTENTION`); gamma = 0.9.
Departure (named in `meta`): p_hat is renormalised over the top-k tokens of the token pass (k = `tokens.top_k`,
10 by default), not the whole vocabulary; with the default threshold only tokens ranked below k with p >= 0.01
are missing. IDF comes from a recorded local corpus (`haldet.models.idf`; default the packaged HaluEval texts, a
substitute for the paper's 1M RedPajama documents). A unit with no keyword token scores 0 (the method's mask).
Response level: the mean over keyword tokens.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Scores, register
from haldet.detectors.unit import UnitDetector
from haldet.errors import HaldetError
from haldet.signals import Signal, SignalView

KEYWORD_POS = ("NOUN", "PROPN", "NUM")


def corrected_uncertainty(topk_ids: np.ndarray, topk_logprobs: np.ndarray, idf: np.ndarray,
                          threshold: float) -> np.ndarray:
    """h_i per token from the top-k (observed token at index 0); NaN where no top-k token passes the threshold."""
    p = np.exp(np.asarray(topk_logprobs, dtype=np.float64))
    w = np.where(p >= threshold, p * idf[np.asarray(topk_ids)], 0.0)
    total = w.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_hat = w / total
        bits = -np.where(p_hat > 0, p_hat * np.log2(np.where(p_hat > 0, p_hat, 1.0)), 0.0).sum(axis=1)
        h = -np.log(p_hat[:, 0] + 1e-10) + np.exp2(bits)
    h[total[:, 0] <= 0] = np.nan
    return h


def propagate(h: np.ndarray, attention: np.ndarray, keywords: np.ndarray, gamma: float) -> np.ndarray:
    """u_i = h_i + gamma sum_{j<i} w_ij u_j on keyword rows (attention renormalised over j < i); y = mask * u."""
    u = np.array(h, dtype=np.float64)
    att = np.tril(np.asarray(attention, dtype=np.float64), k=-1)
    for i in range(len(u)):
        if keywords[i] and i > 0:
            row = att[i, :i]
            weights = row / (row.sum() + 1e-6)
            prev = np.nan_to_num(u[:i], nan=0.0)
            u[i] = h[i] + gamma * float((weights * prev).sum())
    return np.where(keywords, u, 0.0)


@register("focus")
class Focus(UnitDetector):
    requires = UnitDetector.requires | {Signal.RESPONSE, Signal.TOKEN_TOPK_IDS, Signal.TOKEN_TOPK_LOGPROBS,
                                        Signal.TOKEN_ATTENTION}
    version = "1"
    defaults: ClassVar[dict[str, Any]] = {**UnitDetector.defaults, "gamma": 0.9, "p_threshold": 0.01,
                                          "idf_corpus": "halueval", "tokenizer": None}

    def reads_linguistics(self) -> bool:
        return True

    def identity(self) -> dict[str, Any]:
        """Adds the IDF corpus's file fingerprint: a changed corpus re-scores."""
        from haldet.models.idf import corpus_identity

        out = super().identity()
        out["models"] = {**out.get("models", {}), "idf": corpus_identity(self.params["idf_corpus"])}
        return out

    def _focus(self, items: SignalView) -> list[tuple[np.ndarray, np.ndarray] | str]:
        from haldet.models.idf import idf_table
        from haldet.text.linguistics import analyse, pipeline_id, token_mask

        responses = items.get(Signal.RESPONSE)
        try:
            words = analyse([r or "" for r in responses])
            self.meta["spacy"] = pipeline_id()
        except HaldetError as exc:
            return [f"no keyword analysis: {exc.message}"] * len(items)
        self.meta["p_hat"] = "renormalised over the top-k tokens of the token pass (not the full vocabulary)"
        out: list[tuple[np.ndarray, np.ndarray] | str] = []
        signals = zip(items.generations, words, items.get(Signal.TOKEN_OFFSETS), items.get(Signal.TOKEN_TOPK_IDS),
                      items.get(Signal.TOKEN_TOPK_LOGPROBS), items.get(Signal.TOKEN_ATTENTION), strict=True)
        for gen, wds, offsets, ids, lps, att in signals:
            if offsets is None or ids is None or lps is None or att is None:
                out.append("no token-pass evidence (offsets, top-k, attention) for this item")
                continue
            if len(ids) == 0:
                out.append("no answer tokens")
                continue
            table = idf_table(self.params["tokenizer"] or gen.model, self.params["idf_corpus"])
            self.meta["idf"] = table.meta
            h = corrected_uncertainty(ids, lps, table.idf, float(self.params["p_threshold"]))
            keywords = token_mask(wds, offsets, set(KEYWORD_POS), entity_types=True)
            out.append((propagate(h, att, keywords, float(self.params["gamma"])), keywords))
        return out

    def token_scores(self, items: SignalView) -> list[np.ndarray | str]:
        return [r if isinstance(r, str) else r[0] for r in self._focus(items)]

    def score(self, items: SignalView) -> Scores:
        """Response level: the mean of the keyword tokens' scores (as Focus scores a whole answer)."""
        out = Scores.empty(len(items))
        for i, res in enumerate(self._focus(items)):
            if isinstance(res, str):
                out.invalid(i, res)
                continue
            scores, keywords = res
            vals = scores[keywords & np.isfinite(scores)]
            if len(vals):
                out.set(i, float(vals.mean()))
            else:
                out.invalid(i, "no keyword token with a valid score in the answer")
        return out
