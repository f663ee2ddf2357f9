"""Focus (Zhang et al., 2023; HalluEntity section 4): token uncertainty focused on keywords, corrected by IDF and
propagated along attention, as the method's original code computes it.

For answer token i with model distribution p(. | x_<i) and observed token x_i:
    p_hat(v) = p(v) idf(v) / sum_u p(u) idf(u), over x_i and the tokens with p >= `p_threshold` (the others are
               zeroed; the observed token is never masked, as in the original code)
    h_i      = -ln(p_hat(x_i) + 1e-10) + 2 ** H_2(p_hat)               (IDF-corrected NLL + perplexity in bits)
    u_i      = h_i + gamma * sum_{j<i, j in K} w_ij u_j   for i in K (w_ij = att_ij / sum_{k<i, k in K} att_ik)
    u_i      = h_i otherwise;  y_i = 1[x_i in K] * u_i
K = tokens overlapping a spaCy word that is a noun, proper noun or numeral or lies in a named entity; att = the
answer-to-answer attention, max over layers and heads (`Signal.TOKEN_ATTENTION`); gamma = 0.9.

Named settings (each value a variant, recorded in the detector's identity):
- `propagation`: `keywords` (default, the original: a keyword takes penalties only from earlier keywords, attention
  renormalised over them) or `all` (every earlier token, attention renormalised over all of them; lm-polygraph's
  Focus and haldet's focus v1).
- `idf_formula`: `focus` (default, ln(N / (df + 1)) as Focus and HalluEntity) or `smoothed`
  (ln((1 + N) / (1 + df)) + 1); `haldet.models.idf.IDF_FORMULAS`.
- `support`: `topk` (default; departure: p_hat is renormalised over the top-k tokens of the token pass, k =
  `tokens.top_k`, so a token ranked below k with p >= `p_threshold` is missing) or `vocab` (no top-k
  renormalisation: the paper's whole-vocabulary p_hat; exact from the top-k where the top-k holds every token with
  p >= `p_threshold`, i.e. its last entry is below the threshold, and NaN with the reason elsewhere; a
  `tokens.top_k` of 1 + 1 / p_threshold (101 at 0.01) makes that hold).
IDF comes from a recorded corpus (`idf_corpus`: default the packaged HaluEval texts, a substitute for the paper's
1M RedPajama documents, or one local file, `haldet.models.idf`; `hf:DATASET_ID` streamed from the hub or a list of
local files, capped at `idf_documents`, built once into the user cache, `haldet.models.idf_corpus`), or from a table
file built by `haldet detectors idf` (`idf_table`); the table's record (corpus, tokenizer, documents) is in the
identity. A unit with no keyword token scores 0 (the method's mask).
Response level: the mean over keyword tokens.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors.base import Scores, register
from haldet.detectors.unit import UnitDetector
from haldet.errors import HaldetError
from haldet.signals import Signal, SignalView
from haldet.text.linguistics import analyse, pipeline_id, token_mask

KEYWORD_POS = ("NOUN", "PROPN", "NUM")
PROPAGATIONS = {"keywords": "from earlier keyword tokens only, attention renormalised over them (original Focus)",
                "all": "from every earlier token, attention renormalised over all of them (lm-polygraph, focus v1)"}
SUPPORTS = {"topk": "p_hat renormalised over the token pass's top-k",
            "vocab": "p_hat over the whole vocabulary (exact where the top-k holds every token above the threshold)"}


def corrected_uncertainty(topk_ids: np.ndarray, topk_logprobs: np.ndarray, idf: np.ndarray, threshold: float,
                          support: str = "topk") -> np.ndarray:
    """h_i per token from the top-k (observed token at index 0, never masked by the threshold).

    With `support="vocab"` a token whose top-k may miss a token with p >= threshold (its last entry is not below
    the threshold) is NaN: the whole-vocabulary p_hat cannot be known from it."""
    p = np.exp(np.asarray(topk_logprobs, dtype=np.float64))
    keep = p >= threshold
    keep[:, 0] = True
    w = np.where(keep, p * idf[np.asarray(topk_ids)], 0.0)
    total = w.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_hat = w / total
        bits = -np.where(p_hat > 0, p_hat * np.log2(np.where(p_hat > 0, p_hat, 1.0)), 0.0).sum(axis=1)
        h = -np.log(p_hat[:, 0] + 1e-10) + np.exp2(bits)
    h[total[:, 0] <= 0] = np.nan
    if support == "vocab":
        h[~exhaustive(p, threshold)] = np.nan
    elif support != "topk":
        raise ValueError(f"unknown support {support!r}; choose from {', '.join(SUPPORTS)}")
    return h


def exhaustive(p: np.ndarray, threshold: float) -> np.ndarray:
    """Per token: whether the top-k (observed first, then the most likely others) holds every token with
    p >= threshold, i.e. its last alternative is below the threshold."""
    if p.shape[1] < 2 or threshold <= 0:
        return np.zeros(len(p), dtype=bool)
    return p[:, -1] < threshold


def propagate(h: np.ndarray, attention: np.ndarray, keywords: np.ndarray, gamma: float,
              propagation: str = "keywords") -> np.ndarray:
    """u_i = h_i + gamma sum_j w_ij u_j on keyword rows, j over earlier keywords (`keywords`) or all earlier tokens
    (`all`), attention renormalised over those j; y = mask * u."""
    if propagation not in PROPAGATIONS:
        raise ValueError(f"unknown propagation {propagation!r}; choose from {', '.join(PROPAGATIONS)}")
    u = np.array(h, dtype=np.float64)
    att = np.tril(np.asarray(attention, dtype=np.float64), k=-1)
    sources = np.asarray(keywords, dtype=bool) if propagation == "keywords" else np.ones(len(u), dtype=bool)
    for i in range(len(u)):
        if keywords[i] and i > 0:
            row = np.where(sources[:i], att[i, :i], 0.0)
            weights = row / (row.sum() + 1e-6)
            prev = np.nan_to_num(u[:i], nan=0.0)
            u[i] = h[i] + gamma * float((weights * prev).sum())
    return np.where(keywords, u, 0.0)


@register("focus")
class Focus(UnitDetector):
    method_family = "information (token probabilities)"
    paper = "Zhang et al. 2023, Enhancing uncertainty-based hallucination detection with stronger focus"
    peers = ("lm-polygraph",)
    requires = UnitDetector.requires | {Signal.RESPONSE, Signal.TOKEN_TOPK_IDS, Signal.TOKEN_TOPK_LOGPROBS,
                                        Signal.TOKEN_ATTENTION}
    version = "2"
    defaults: ClassVar[dict[str, Any]] = {**UnitDetector.defaults, "gamma": 0.9, "p_threshold": 0.01,
                                          "idf_corpus": "halueval", "tokenizer": None, "propagation": "keywords",
                                          "idf_formula": "focus", "support": "topk",
                                          # a table file from `haldet detectors idf` (instead of idf_corpus), and
                                          # the most documents counted of an hf: / multi-file idf_corpus
                                          "idf_table": None, "idf_documents": None}

    def __init__(self, **params: Any) -> None:
        from haldet.models.idf import IDF_FORMULAS  # lazy: h5py

        super().__init__(**params)
        for name, known in (("propagation", PROPAGATIONS), ("idf_formula", IDF_FORMULAS), ("support", SUPPORTS)):
            if self.params[name] not in known:
                raise ValueError(f"detector 'focus': {name} must be one of {', '.join(known)}, "
                                 f"not {self.params[name]!r}")
        if self.params["idf_table"] is not None and self.params["idf_corpus"] != "halueval":
            raise ValueError("detector 'focus': give idf_table (a built table) or idf_corpus (a corpus), not both")

    def reads_linguistics(self) -> bool:
        return True

    def identity(self) -> dict[str, Any]:
        """Adds where the IDF comes from (the table file's record, or the corpus): a changed one re-scores."""
        from haldet.models.idf_corpus import focus_idf_identity  # lazy: h5py

        out = super().identity()
        out["models"] = {**out.get("models", {}), "idf": focus_idf_identity(
            self.params["idf_corpus"], self.params["idf_table"], self.params["idf_documents"])}
        return out

    def _focus(self, items: SignalView) -> list[tuple[np.ndarray, np.ndarray] | str]:
        from haldet.models.idf_corpus import IDF_FORMULAS, focus_table  # lazy: h5py

        responses = items.get(Signal.RESPONSE)
        try:
            words = analyse([r or "" for r in responses])
            self.meta["spacy"] = pipeline_id()
        except HaldetError as exc:
            return [f"no keyword analysis: {exc.message}"] * len(items)
        support, formula = self.params["support"], self.params["idf_formula"]
        self.meta["p_hat"] = SUPPORTS[support]
        self.meta["propagation"] = PROPAGATIONS[self.params["propagation"]]
        self.meta["idf_formula"] = IDF_FORMULAS[formula]
        threshold = float(self.params["p_threshold"])
        out: list[tuple[np.ndarray, np.ndarray] | str] = []
        not_exhaustive = 0
        signals = zip(items.generations, words, items.get(Signal.TOKEN_OFFSETS), items.get(Signal.TOKEN_TOPK_IDS),
                      items.get(Signal.TOKEN_TOPK_LOGPROBS), items.get(Signal.TOKEN_ATTENTION), strict=True)
        for gen, wds, offsets, ids, lps, att in signals:
            if offsets is None or ids is None or lps is None or att is None:
                out.append("no token-pass evidence (offsets, top-k, attention) for this item")
                continue
            if len(ids) == 0:
                out.append("no answer tokens")
                continue
            table = focus_table(self.params["idf_corpus"], self.params["idf_table"], self.params["idf_documents"],
                                self.params["tokenizer"] or gen.model, self.progress)
            self.meta["idf"] = table.meta
            h = corrected_uncertainty(ids, lps, table.idf(formula), threshold, support)
            if support == "vocab":
                not_exhaustive += int((~exhaustive(np.exp(np.asarray(lps, dtype=np.float64)), threshold)).sum())
            keywords = token_mask(wds, offsets, set(KEYWORD_POS), entity_types=True)
            out.append((propagate(h, att, keywords, float(self.params["gamma"]), self.params["propagation"]),
                        keywords))
        if support == "vocab":
            self.meta["tokens_topk_not_exhaustive"] = (
                f"{not_exhaustive} tokens NaN: their top-k may miss a token with p >= {threshold}; raise "
                f"tokens.top_k to {int(np.ceil(1 / threshold)) + 1 if threshold > 0 else 'the vocabulary size'} "
                "to cover every token")
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
