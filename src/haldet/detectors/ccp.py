"""Claim-conditioned probability, CCP (Fadeeva et al., 2024; HalluEntity section 4), per answer token.

For token x_i with its top-k alternatives x_i^k from the token pass (observed token at index 0, k = 10 by default),
an NLI model compares the context followed by each alternative with the context followed by the observed token
(premise: context + alternative, hypothesis: context + observed token; the context is the response from the start
of the token's sentence, or the whole response prefix with `context: response`):

    y_i = -log( sum_{k: entails} p(x_i^k) / sum_{k: entails or contradicts} p(x_i^k) )

The observed token counts as entailing itself; an alternative whose text equals it (ignoring surrounding space)
entails without an NLI call; neutral alternatives drop out. Default NLI model: DeBERTa-base MNLI (the paper's);
when no NLI model can be loaded (offline, no weights) every item is NaN with that reason, never a fallback number.

A unit's score is the `aggregate` of its token values (mean by default), or with `aggregate: claim` the claim-level
CCP of lm-polygraph that VeriGray thresholds: -prod_i exp(-y_i) = minus the product of the tokens' entailed shares,
in [-1, 0] (near 0: some token's alternatives contradict it). `threshold` (None by default) makes the detector give
its own binary verdict, hallucinated when the score > threshold (`decision_threshold`, read by the VeriGray suite;
VeriGray's appendix D: claim score, tau = -0.001); without it a suite takes the threshold from validation.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.backends.hf.loading import load_tokenizer
from haldet.detectors._consistency import cache_for, pair_model
from haldet.detectors.base import register
from haldet.detectors.unit import AGGREGATES, UnitDetector
from haldet.errors import HaldetError
from haldet.models.pairs.base import CONTRADICTION, ENTAILMENT, NEUTRAL
from haldet.signals import Signal, SignalView
from haldet.text.linguistics import analyse, sentence_start


def ccp_scores(topk_logprobs: np.ndarray, entail: np.ndarray, contradict: np.ndarray) -> np.ndarray:
    """[T] CCP from [T, k] log-probs and [T, k] entailment / contradiction weights (1/0 for hard labels, NLI
    probabilities for the soft variant); column 0 (the observed token) always entails fully."""
    p = np.exp(np.asarray(topk_logprobs, dtype=np.float64))
    e, c = np.array(entail, dtype=np.float64), np.array(contradict, dtype=np.float64)
    e[:, 0], c[:, 0] = 1.0, 0.0
    return -np.log((p * e).sum(axis=1) / (p * (e + c)).sum(axis=1))


def claim_score(token_ccp: np.ndarray) -> float:
    """lm-polygraph's claim-level CCP uncertainty in [-1, 0] from token values y_i = -log(entailed share):
    -prod_i exp(-y_i)."""
    return float(-np.exp(-np.sum(np.asarray(token_ccp, dtype=np.float64))))


@register("ccp")
class CCP(UnitDetector):
    """Variants: `hard` (the method: each alternative's NLI class is the argmax), `soft` (expected counts: an
    alternative contributes p_k P(entail) to the numerator and p_k (P(entail) + P(contradict)) to the denominator)."""
    method_family = "information (token probabilities)"
    paper = "Fadeeva et al. 2024, Fact-checking the output of LLMs via token-level uncertainty quantification"
    peers = ("lm-polygraph",)

    conformance_exemptions: ClassVar[dict[str, str]] = {
        "check_not_constant": "the conformance suite's random stand-in NLI model may call every pair neutral; hard "
                              "labels then give every token, and so every claim, the same score"}
    variants: ClassVar[dict[str, str]] = {"hard": "argmax NLI class per alternative (Fadeeva et al.)",
                                          "soft": "NLI probabilities as expected entail/contradict counts"}
    requires = UnitDetector.requires | {Signal.RESPONSE, Signal.TOKEN_TOPK_IDS, Signal.TOKEN_TOPK_LOGPROBS}
    version = "1"
    auxiliary: ClassVar[dict[str, str]] = {"nli_model": "nli"}
    nan_without_auxiliary = True  # no NLI model: every item NaN with the reason (`token_scores`)
    aggregates: ClassVar[tuple[str, ...]] = (*AGGREGATES, "claim")
    defaults: ClassVar[dict[str, Any]] = {**UnitDetector.defaults, "nli_model": "microsoft/deberta-base-mnli",
                                          "variant": "hard", "fallback": None, "context": "sentence", "tokenizer": None,
                                          "batch_size": 32, "max_length": 256, "device": "auto", "threshold": None}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        threshold = self.params["threshold"]
        if threshold is not None and not isinstance(threshold, int | float):
            raise ValueError(f"ccp: threshold must be a number or null, not {threshold!r}")

    @property
    def decision_threshold(self) -> float | None:
        """The fixed threshold of the binary verdict (score > threshold), or None: the suite picks one."""
        return None if self.params["threshold"] is None else float(self.params["threshold"])

    def combine(self, values: np.ndarray) -> float:
        return claim_score(values) if self.params["aggregate"] == "claim" else super().combine(values)

    def reads_linguistics(self) -> bool:
        return self.params["context"] == "sentence"

    def token_scores(self, items: SignalView) -> list[np.ndarray | str]:
        if self.params["context"] not in ("sentence", "response"):
            raise ValueError(f"ccp: context must be sentence or response, not {self.params['context']!r}")
        try:  # the NLI model first: without one there is nothing to compute (NaN with the reason, no decoding)
            model = pair_model(self, "nli", "nli_model", batch_size=self.params["batch_size"],
                               max_length=self.params["max_length"])
        except HaldetError as exc:
            self.meta["nli_model"] = {"requested": self.params["nli_model"], "loaded": None, "error": exc.message}
            return [f"no NLI model could run ({exc.message})"] * len(items)
        responses = [r or "" for r in items.get(Signal.RESPONSE)]
        words = analyse(responses) if self.params["context"] == "sentence" else [[] for _ in responses]
        out: list[np.ndarray | str] = []
        jobs: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, tuple[str, str]]]]] = []
        tokenizers: dict[str, Any] = {}
        for i, (gen, text, wds, offsets, ids, lps) in enumerate(zip(
                items.generations, responses, words, items.get(Signal.TOKEN_OFFSETS),
                items.get(Signal.TOKEN_TOPK_IDS), items.get(Signal.TOKEN_TOPK_LOGPROBS), strict=True)):
            out.append("")
            if offsets is None or ids is None or lps is None or len(ids) == 0:
                out[i] = "no token-pass evidence (offsets, top-k) for this item"
                continue
            name = self.params["tokenizer"] or gen.model
            if name not in tokenizers:
                tokenizers[name] = load_tokenizer(name)
            tok = tokenizers[name]
            entail, contradict = np.zeros(np.shape(ids)), np.zeros(np.shape(ids))  # neutral unless the NLI says
            pairs = []
            for t, ((a, _b), row) in enumerate(zip(np.asarray(offsets), np.asarray(ids), strict=True)):
                ctx = text[sentence_start(wds, a) if self.params["context"] == "sentence" else 0 : a]
                observed = str(tok.decode([int(row[0])], skip_special_tokens=True))
                for k in range(1, len(row)):
                    alt = str(tok.decode([int(row[k])], skip_special_tokens=True))
                    if not alt.strip():
                        continue  # a special or blank token: neutral
                    if alt.strip() == observed.strip():
                        entail[t, k] = 1.0
                    else:
                        pairs.append((t, k, ((ctx + alt).strip(), (ctx + observed).strip())))
            jobs.append((i, np.asarray(lps), entail, contradict, pairs))
        all_pairs = [p for *_, ps in jobs for _, _, p in ps]
        if all_pairs:
            probs = cache_for(self).scores(model, all_pairs, self.progress("ccp NLI pairs", len(set(all_pairs))))
            if self.params["variant"] == "hard":
                hard = np.argmax(probs, axis=1)
                probs = np.stack([hard == ENTAILMENT, hard == NEUTRAL, hard == CONTRADICTION], axis=1).astype(float)
            rows = iter(probs)
            for _, _, entail, contradict, ps in jobs:
                for t, k, _ in ps:
                    row = next(rows)
                    entail[t, k], contradict[t, k] = row[ENTAILMENT], row[CONTRADICTION]
        for i, lps, entail, contradict, _ in jobs:
            out[i] = ccp_scores(lps, entail, contradict)
        return out
