"""SelfCheckGPT-NLI (Manakul et al. 2023; paper appendix E.5): do the samples contradict the answer's sentences?"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import answer_and_samples, pair_scores
from haldet.detectors.base import Detector, Scores, register
from haldet.models.pairs.base import CONTRADICTION, ENTAILMENT
from haldet.signals import Signal, SignalView
from haldet.text.sentences import split_many, splitter_id

_LETTER = re.compile(r"^\s*(?:(?:the\s+)?answer\s*(?:is)?\s*[:\-]?\s*)?\(?([A-Za-z])\)?\s*[.:)]?\s*$", re.IGNORECASE)


def expand_option(text: str, options: dict[str, str]) -> str:
    """A bare option letter ("B", "(b)", "Answer: B.") becomes that option's text, so NLI compares meanings
    rather than labels; anything else is returned unchanged."""
    if not options:
        return text
    m = _LETTER.match(text)
    if not m:
        return text
    by_upper = {str(k).strip().upper(): v for k, v in options.items()}
    return by_upper.get(m.group(1).upper(), text)


@register("selfcheck_nli")
class SelfCheckNLI(Detector):
    """P(contradiction | premise = sample k, hypothesis = answer sentence j) from an NLI model.

    Variant "selfcheckgpt" (the method's source): s = mean_j mean_k P(c) / (P(c) + P(e)) (the original's
    two-way entailment/contradiction normalisation). Variant "paper" (OpenHalDet E.5): s = max_j mean_k P(c).
    Bare MCQ letters in the answer and the samples are expanded to the option text.
    """
    method_family = "sample consistency"
    paper = "Manakul et al. 2023, SelfCheckGPT: zero-resource black-box hallucination detection"
    peers = ("selfcheckgpt", "uqlm")

    requires = frozenset({Signal.RESPONSE, Signal.SAMPLES})
    auxiliary: ClassVar[dict[str, str]] = {"nli_model": "nli", "sentences": "splitter"}
    variants: ClassVar[dict[str, str]] = {
        "selfcheckgpt": "mean over sentences of mean over samples of P(c)/(P(c)+P(e)) (SelfCheckGPT)",
        "paper": "max over sentences of mean over samples of P(contradiction) (OpenHalDet E.5)",
    }
    defaults: ClassVar[dict[str, Any]] = {
        "variant": "selfcheckgpt", "nli_model": "roberta-large-mnli", "fallback": "llm:smollm2-135m",
        "batch_size": 16, "max_length": 512, "device": "auto", "expand_options": True,
    }

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        responses = items.get(Signal.RESPONSE)
        all_samples = items.get(Signal.SAMPLES)
        prepared: list[tuple[list[str], list[str]] | None] = []
        texts: list[str] = []
        for i, (inst, resp, raw) in enumerate(zip(items.instances, responses, all_samples, strict=True)):
            usable = answer_and_samples(resp, raw)
            opts = inst.options if self.params["expand_options"] else {}
            if isinstance(usable, str):
                out.invalid(i, usable)
                prepared.append(None)
            else:
                prepared.append(([expand_option(s, opts) for s in usable[1]], []))
                texts.append(expand_option(usable[0], opts))
        sentences = iter(split_many(texts))
        pairs: list[tuple[str, str]] = []
        for entry in prepared:
            if entry is not None:
                entry[1].extend(next(sentences))
                pairs += [(s, sent) for sent in entry[1] for s in entry[0]]
        self.meta["sentence_splitter"] = splitter_id()
        if not pairs:
            return self._finish(out, prepared, np.zeros((0, 3)))
        probs = pair_scores(self, "nli", "nli_model", pairs, "selfcheck_nli pairs")
        return self._finish(out, prepared, probs)

    def _finish(self, out: Scores, prepared: list[tuple[list[str], list[str]] | None], probs: np.ndarray) -> Scores:
        pos = 0
        for i, entry in enumerate(prepared):
            if entry is None:
                continue
            samples, sents = entry
            if not sents:
                out.invalid(i, "no sentence in the response")
                continue
            n = len(samples) * len(sents)
            block = probs[pos : pos + n].reshape(len(sents), len(samples), -1)
            pos += n
            if self.params["variant"] == "paper":
                out.set(i, float(block[..., CONTRADICTION].mean(axis=1).max()))
            else:
                c, e = block[..., CONTRADICTION], block[..., ENTAILMENT]
                ratio = np.where(c + e > 0, c / np.maximum(c + e, 1e-300), 0.5)
                out.set(i, float(ratio.mean(axis=1).mean()))
        return out
