"""SAR, shifting attention to relevance (Duan et al. 2024; paper appendix E.13).

Sentence-level SAR: each sample's probability is topped up by the probability of the samples that mean the
same thing, weighted by a cross-encoder similarity g and a temperature t:

    ES(s_j) = -log( p(s_j|x) + (1/t) sum_{k != j} g(s_j, s_k) p(s_k|x) ),   s = (1/K) sum_j ES(s_j)

computed in log space (log-sum-exp) so tiny sequence probabilities do not underflow.

Token-level SAR (TokenSAR) weighs each answer token's -log p by its relevance R(y_t) = 1 - g(x + y, x + y
without y_t), normalised over tokens; it is exposed as functions and as the `token_sar` detector (the entity
suites use it).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.backends.hf.loading import load_tokenizer
from haldet.detectors._consistency import pair_scores, sample_logliks
from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView


def sentence_sar(logliks: np.ndarray, sim: np.ndarray, t: float) -> float:
    """Mean over samples of -log(p_j + (1/t) sum_{k != j} g_jk p_k), from log-likelihoods `logliks` [K] and the
    similarity matrix `sim` [K, K] (diagonal ignored; zero similarity contributes nothing)."""
    k = len(logliks)
    es = np.empty(k)
    for j in range(k):
        terms = [logliks[j]]
        for m in range(k):
            if m != j and sim[j, m] > 0:
                terms.append(logliks[m] + np.log(sim[j, m]) - np.log(t))
        arr = np.asarray(terms)
        top = arr.max()
        es[j] = -(top + np.log(np.exp(arr - top).sum()))
    return float(es.mean())


def token_sar(token_logprobs: np.ndarray, relevance: np.ndarray) -> float:
    """sum_t -log p(y_t) * R(y_t) / sum_t R(y_t); equal weights when every relevance is zero."""
    lp = np.asarray(token_logprobs, dtype=np.float64)
    r = np.clip(np.asarray(relevance, dtype=np.float64), 0.0, None)
    w = r / r.sum() if r.sum() > 0 else np.full(len(r), 1.0 / len(r))
    return float((-lp * w).sum())


def token_relevance_pairs(prefix: str, pieces: list[str]) -> list[tuple[str, str]]:
    """(full text, text without token t) for each token t: the pairs whose similarity g gives R = 1 - g.
    `pieces[t]` is the answer decoded without token t; the last entry of the list is the full answer."""
    full = pieces[-1]
    return [(f"{prefix} {full}".strip(), f"{prefix} {p}".strip()) for p in pieces[:-1]]


@register("sar")
class SAR(Detector):
    """Sentence-level SAR over the K samples (see module docstring). Similarity: cross-encoder on "question
    sample" texts (default cross-encoder/stsb-distilroberta-base; offline fallback: MiniLM cosine), t = 0.001.
    Samples that are empty or lack a finite log-likelihood are dropped; fewer than two left is invalid."""
    method_family = "sample consistency"
    paper = ("Duan et al. 2024, Shifting attention to relevance: towards the predictive uncertainty quantification "
             "of free-form LLMs")
    peers = ("lm-polygraph", "TruthTorchLM")

    requires = frozenset({Signal.SAMPLES, Signal.SAMPLE_LOGLIKS})
    auxiliary: ClassVar[dict[str, str]] = {"similarity_model": "similarity"}
    defaults: ClassVar[dict[str, Any]] = {
        "similarity_model": "cross-encoder/stsb-distilroberta-base", "fallback": "minilm",
        "temperature": 0.001, "length_normalize": False, "include_question": True, "min_samples": 2,
        "batch_size": 32, "max_length": 512, "device": "auto",
    }

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        prepared: list[tuple[int, list[str], np.ndarray]] = []
        pairs: list[tuple[str, str]] = []
        for i, (inst, raw, ll) in enumerate(zip(items.instances, items.get(Signal.SAMPLES),
                                                items.get(Signal.SAMPLE_LOGLIKS), strict=True)):
            arr = sample_logliks(ll, len(raw)) if raw is not None else None
            if raw is None or arr is None:
                out.invalid(i, "no samples" if raw is None else "no sample log-likelihoods")
                continue
            keep = [k for k, s in enumerate(raw) if isinstance(s, str) and s.strip() and np.isfinite(arr[k, 0])
                    and arr[k, 1] > 0]
            if len(keep) < self.params["min_samples"]:
                out.invalid(i, f"{len(keep)} sample(s) with text and a finite log-likelihood; "
                               f"need {self.params['min_samples']}")
                continue
            lls = arr[keep, 0] / arr[keep, 1] if self.params["length_normalize"] else arr[keep, 0]
            q = inst.question if self.params["include_question"] else ""
            texts = [f"{q} {raw[k].strip()}".strip() for k in keep]
            prepared.append((i, texts, lls))
            pairs += [(a, b) for x, a in enumerate(texts) for y, b in enumerate(texts) if x != y]
        sim: dict[tuple[str, str], float] = {}
        if pairs:
            values = pair_scores(self, "similarity", "similarity_model", pairs, "sar similarity pairs")
            sim = {p: float(v[0]) for p, v in zip(pairs, values, strict=True)}
        t = float(self.params["temperature"])
        for i, texts, lls in prepared:
            k = len(texts)
            mat = np.zeros((k, k))
            for a in range(k):
                for b in range(k):
                    if a != b:
                        mat[a, b] = sim[(texts[a], texts[b])]
            out.set(i, sentence_sar(lls, mat, t))
        return out


@register("token_sar")
class TokenSAR(Detector):
    """TokenSAR on the greedy answer: relevance-weighted token NLL (see `token_sar`). Token pieces are decoded
    with the generating model's tokenizer (tokenizer only; the model is not run)."""
    method_family = "information (token probabilities)"
    paper = "Duan et al. 2024, Shifting attention to relevance (token SAR)"
    peers = ("lm-polygraph", "TruthTorchLM")

    requires = frozenset({Signal.RESPONSE, Signal.TOKEN_LOGPROBS})
    auxiliary: ClassVar[dict[str, str]] = {"similarity_model": "similarity"}
    defaults: ClassVar[dict[str, Any]] = {
        "similarity_model": "cross-encoder/stsb-distilroberta-base", "fallback": "minilm",
        "include_question": True, "tokenizer": None, "batch_size": 32, "max_length": 512, "device": "auto",
    }

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        tokenizers: dict[str, Any] = {}
        prepared: list[tuple[int, np.ndarray, list[tuple[str, str]]]] = []
        for i, (inst, gen, lp) in enumerate(zip(items.instances, items.generations,
                                                items.get(Signal.TOKEN_LOGPROBS), strict=True)):
            ids = list(gen.token_ids)
            if not ids or not np.all(np.isfinite(lp)):
                out.invalid(i, "empty response" if not ids else "non-finite token log-probabilities")
                continue
            name = self.params["tokenizer"] or gen.model
            if name not in tokenizers:
                tokenizers[name] = load_tokenizer(name)
            tok = tokenizers[name]
            pieces = [tok.decode(ids[:t] + ids[t + 1:], skip_special_tokens=True).strip() for t in range(len(ids))]
            pieces.append(tok.decode(ids, skip_special_tokens=True).strip())
            q = inst.question if self.params["include_question"] else ""
            prepared.append((i, np.asarray(lp, dtype=np.float64), token_relevance_pairs(q, pieces)))
        pairs = [p for _, _, ps in prepared for p in ps]
        if pairs:
            values = pair_scores(self, "similarity", "similarity_model", pairs, "token_sar pairs")
            pos = 0
            for i, lp, ps in prepared:
                g = values[pos : pos + len(ps), 0]
                pos += len(ps)
                out.set(i, token_sar(lp, 1.0 - g))
        return out
