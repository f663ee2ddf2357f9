"""SelfCheckGPT-Prompt (Manakul, Liusie & Gales 2023, "SelfCheckGPT: Zero-Resource Black-Box Hallucination
Detection for Generative Large Language Models", section 5.5): an LLM asked, for each sentence of the answer and
each sampled passage, whether the passage supports the sentence.

x_{j,k} = 0 when the reply to (sample k, sentence j) is Yes, 1 when it is No, 0.5 for any other reply (the paper's
mapping); sentence score S(j) = (1/K) sum_k x_{j,k}; the answer's score is the mean over its sentences (as the
paper's passage-level scores). The checker is a local model (`model`, default the embedded SmolLM2, the default
run's own model) or any model behind an OpenAI-compatible endpoint (`model` at `base_url`), asked through the one
structured client (`haldet.models.pairs.prompted`, question "sentence_support"); each (sample, sentence) pair is
asked once per checker and kept in the cell's pair cache. Newlines of a sample become spaces (as the source does).
"""

from __future__ import annotations

from typing import Any, ClassVar

from haldet.detectors._consistency import answer_and_samples, prompted_scores
from haldet.detectors.base import Detector, Scores, register
from haldet.signals import Signal, SignalView
from haldet.text.sentences import split_many, splitter_id


@register("selfcheck_prompt")
class SelfCheckPrompt(Detector):
    """s = mean over the answer's sentences of the mean over samples of x (Yes 0, No 1, other 0.5)."""

    method_family = "sample consistency"
    paper = "Manakul et al. 2023, SelfCheckGPT: zero-resource black-box hallucination detection"
    peers = ("selfcheckgpt",)
    requires = frozenset({Signal.RESPONSE, Signal.SAMPLES})
    auxiliary: ClassVar[dict[str, str]] = {"model": "causal_lm", "sentences": "splitter"}
    defaults: ClassVar[dict[str, Any]] = {
        "model": "smollm2-135m", "base_url": None, "api_key_env": "OPENAI_API_KEY", "timeout": 60.0,
        "concurrency": 8, "retries": 4, "batch_size": 8,
    }
    conformance_exemptions: ClassVar[dict[str, str]] = {
        "check_not_constant": "the suite's stand-in checker (a random tiny Llama) never starts a reply with Yes or No, "
                              "so every pair maps to 0.5; the mapping is tested on the mock server's replies"}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        prepared: list[tuple[int, list[str]]] = []
        answers: list[str] = []
        for i, (resp, raw) in enumerate(zip(items.get(Signal.RESPONSE), items.get(Signal.SAMPLES), strict=True)):
            usable = answer_and_samples(resp, raw)
            if isinstance(usable, str):
                out.invalid(i, usable)
            else:
                prepared.append((i, [" ".join(s.split("\n")) for s in usable[1]]))
                answers.append(usable[0])
        self.meta["sentence_splitter"] = splitter_id()
        blocks: list[tuple[int, list[str], list[str]]] = []
        pairs: list[tuple[str, str]] = []
        for (i, samples), sentences in zip(prepared, split_many(answers), strict=True):
            if not sentences:
                out.invalid(i, "no sentence in the response")
                continue
            blocks.append((i, samples, sentences))
            pairs += [(s, sent) for sent in sentences for s in samples]
        if not pairs:
            return out
        values, model = prompted_scores(self, "sentence_support", str(self.params["model"]), pairs,
                                        "selfcheck_prompt pairs")
        self.meta["model"] = model.id
        pos = 0
        for i, samples, sentences in blocks:
            n = len(samples) * len(sentences)
            x = 1.0 - values[pos : pos + n, 0].reshape(len(sentences), len(samples))
            pos += n
            out.set(i, float(x.mean(axis=1).mean()))
        return out
