"""SelfCheckGPT-BERTScore (Manakul et al. 2023; paper appendix E.4): are the answer's sentences echoed by the
samples?"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import answer_and_samples, cache_for, pair_model
from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView
from haldet.text.sentences import split_many, splitter_id


@register("selfcheck_bertscore")
class SelfCheckBERTScore(Detector):
    """For answer sentence j and sample k, F1_jk = max over the sample's sentences of BERTScore F1 (bert-score
    library); s = (1/M) sum_j (1 - mean_k F1_jk). Default encoder roberta-large (layer 17, no baseline
    rescaling, as in the paper); offline it falls back to the packaged MiniLM (recorded in the run)."""
    method_family = "sample consistency"
    paper = "Manakul et al. 2023, SelfCheckGPT: zero-resource black-box hallucination detection"
    peers = ("selfcheckgpt", "uqlm")

    requires = frozenset({Signal.RESPONSE, Signal.SAMPLES})
    auxiliary: ClassVar[dict[str, str]] = {"model": "bertscore", "sentences": "splitter"}
    defaults: ClassVar[dict[str, Any]] = {
        "model": "roberta-large", "fallback": "minilm", "num_layers": None, "rescale_with_baseline": False,
        "batch_size": 64, "device": "auto",
    }

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        responses = items.get(Signal.RESPONSE)
        all_samples = items.get(Signal.SAMPLES)
        keep: list[int] = []
        sample_lists: list[list[str]] = []
        for i, (resp, raw) in enumerate(zip(responses, all_samples, strict=True)):
            usable = answer_and_samples(resp, raw)
            if isinstance(usable, str):
                out.invalid(i, usable)
            else:
                keep.append(i)
                sample_lists.append(usable[1])
        # one spaCy pass over every answer and sample text
        flat = [responses[i].strip() for i in keep] + [s for ss in sample_lists for s in ss]
        split = split_many(flat)
        self.meta["sentence_splitter"] = splitter_id()
        answer_sents = split[: len(keep)]
        rest = iter(split[len(keep):])
        sample_sents = [[next(rest) for _ in ss] for ss in sample_lists]
        pairs = sorted({(a, b) for sents, samples in zip(answer_sents, sample_sents, strict=True)
                        for a in sents for smp in samples for b in smp})
        if pairs:
            model = pair_model(self, "bertscore", "model", batch_size=self.params["batch_size"],
                               num_layers=self.params["num_layers"],
                               rescale_with_baseline=self.params["rescale_with_baseline"])
            values = cache_for(self).scores(model, pairs, self.progress("selfcheck_bertscore pairs", len(pairs)))
            f1 = {p: float(v[2]) for p, v in zip(pairs, values, strict=True)}
        for i, sents, split_samples in zip(keep, answer_sents, sample_sents, strict=True):
            samples_s = [s for s in split_samples if s]
            if not sents:
                out.invalid(i, "no sentence in the response")
                continue
            if not samples_s:
                out.invalid(i, "no sentence in any sample")
                continue
            per_sentence = [np.mean([max(f1[(a, b)] for b in smp) for smp in samples_s]) for a in sents]
            out.set(i, float(np.mean([1.0 - x for x in per_sentence])))
        return out
