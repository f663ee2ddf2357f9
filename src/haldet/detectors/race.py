"""RACE (Wang, Su, Ai & Liu 2025, "Joint Evaluation of Answer and Reasoning Consistency for Hallucination Detection
in Large Reasoning Models", arXiv 2506.04832): a reasoning model's answer and its reasoning trace judged together,
over the primary output and K samples, each with its reasoning (`SampleTexts.reasoning`).

The paper's four signals, as defined there and in its public code (formulas only; haldet's code is its own):
- S_CC, reasoning consistency: the primary trace's steps c_1..c_m checked against each sample's trace (its steps
  joined by newlines) the SelfCheckGPT-NLI way, s_jk = P(contradiction) / (P(contradiction) + P(entailment));
  S_CC = sum_j w_j mean_k s_jk.
- S_AA, answer uncertainty: SINdex over the primary answer and the K sampled answers, each embedded as
  "question [SEP] answer": the distinct texts (sorted) are clustered greedily, a text joining the first cluster whose
  mean cosine distance to it is below 1 - `threshold` (0.9), else starting a new one; with p_i = |C_i| / N (N distinct
  texts) and p'_i = p_i times the cluster's mean pairwise cosine (1 for one text), S_AA = -sum_i p'_i log p'_i.
- S_CA, reasoning-answer alignment: how far the sampled answers are from what the primary reasoning supports.
- S_Coh, internal coherence: the share of the trace's named entities that its extracted steps leave out.
RACE = S_CC + S_AA + S_CA + S_Coh (the public code's unweighted sum; S_Coh is added only when positive).

What haldet does differently, each a named setting recorded in the identity:
- `steps: sentences`. The paper distils each trace into steps with an LLM CoT extractor (a fine-tuned Llama-8B);
  haldet takes the trace's sentences (`haldet.text.sentences`) as its steps. S_Coh measures what an abstractive
  extractor drops, so with the trace's own sentences it is 0 by construction and left out of the sum.
- `weights: uniform`. The paper weights the steps by the attention a proxy LLM's answer tokens pay them; haldet
  uses the public code's fallback without that model, w_j = 1 / m.
- `alignment`. The paper's S_CA is the mean token entropy of each sampled answer forced after the primary steps
  ("Thought: ... Answer:") through a proxy LLM, averaged over the samples. `entropy` (the default) does that with the
  target model itself as the proxy, reading each sampled answer after the prompt and the primary output's own
  reasoning (TRACE_ANSWER_ENTROPIES, the `trace_answer` stage: one teacher-forced pass per sample); `nli` reads the
  relation with the NLI model instead, S_CA = mean_k P(c) / (P(c) + P(e)) of sampled answer k (hypothesis) against the
  primary steps joined by newlines (premise), for black-box targets (no token pass). Neither is the paper's proxy
  model: a study that puts RACE numbers beside the paper's must say which ran.
- The cosine of S_AA comes from the similarity pair model (`embedder`, default MiniLM, the encoder the paper names),
  clipped to [0, 1] as every haldet similarity is.
NLI pairs and embeddings go through the run's pair cache, shared with every other detector that asks the same pairs.
Variants give each signal alone (`cc`, `aa`, `ca`), for the ablation the paper reports.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, ClassVar

import numpy as np

from haldet.detectors._consistency import answer_and_samples, pair_scores
from haldet.detectors.base import Detector, Scores, register
from haldet.models.pairs.base import CONTRADICTION, ENTAILMENT
from haldet.signals import SampleTexts, Signal, SignalView
from haldet.text.sentences import split_many, splitter_id

NO_TRACE = "the output has no reasoning trace (RACE reads a reasoning model's trace and its samples' traces)"


def contradiction_ratio(probs: np.ndarray) -> np.ndarray:
    """SelfCheckGPT-NLI's two-way score P(c) / (P(c) + P(e)) of rows of [entailment, neutral, contradiction]
    probabilities (0.5 where both are 0)."""
    c, e = probs[..., CONTRADICTION], probs[..., ENTAILMENT]
    return np.where(c + e > 0, c / np.maximum(c + e, 1e-300), 0.5)


def sindex(similarity: np.ndarray, threshold: float) -> float:
    """SINdex of texts whose pairwise cosine similarities are `similarity` [N, N] (in the order they are clustered):
    greedy clusters (a text joins the first cluster whose mean distance 1 - cos to it is below 1 - `threshold`),
    then -sum_i p'_i log p'_i with p'_i = |C_i| / N times C_i's mean pairwise cosine (1 for a single text)."""
    n = len(similarity)
    clusters: list[list[int]] = []
    for i in range(n):
        for cluster in clusters:
            if float(np.mean([1.0 - similarity[i, j] for j in cluster])) < 1.0 - threshold:
                cluster.append(i)
                break
        else:
            clusters.append([i])
    total = 0.0
    for cluster in clusters:
        pairs = list(combinations(cluster, 2))
        cohesion = float(np.mean([similarity[a, b] for a, b in pairs])) if pairs else 1.0
        p = len(cluster) / n * cohesion
        if p > 0:
            total -= p * float(np.log(p))
    return total


@register("race")
class RACE(Detector):
    """Reasoning and answer consistency of a reasoning model; see the module docstring."""
    method_family = "sample consistency"
    paper = ("Wang, Su, Ai & Liu 2025, Joint evaluation of answer and reasoning consistency for hallucination "
             "detection in large reasoning models (RACE)")
    peers = ()

    version = "1"
    # the default reads the sampled answers' entropies after the primary trace (gray box); `signals` drops them where
    # they are not read (`alignment: nli`, the `cc` and `aa` variants: black box)
    requires = frozenset({Signal.RESPONSE, Signal.SAMPLES, Signal.TRACE_ANSWER_ENTROPIES})
    auxiliary: ClassVar[dict[str, str]] = {"nli_model": "nli", "embedder": "similarity", "sentences": "splitter"}
    variants: ClassVar[dict[str, str]] = {
        "race": "S_CC + S_AA + S_CA: reasoning consistency, answer SINdex and reasoning-answer alignment (RACE)",
        "cc": "S_CC alone: the primary trace's steps against the sampled traces (NLI)",
        "aa": "S_AA alone: SINdex of the primary and sampled answers",
        "ca": "S_CA alone: the sampled answers against the primary trace (NLI)",
    }
    defaults: ClassVar[dict[str, Any]] = {
        "variant": "race", "steps": "sentences", "weights": "uniform", "alignment": "entropy", "threshold": 0.9,
        "nli_model": "roberta-large-mnli", "fallback": "llm:smollm2-135m", "embedder": "minilm",
        "batch_size": 16, "max_length": 512, "device": "auto",
    }
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"steps": ("sentences",), "weights": ("uniform",),
                                                      "alignment": ("entropy", "nli")}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        # another `reads` is refused by the base class: TRACE_ANSWER_ENTROPIES exists for the answer alone (the
        # detector reads the answer and the reasoning apart by definition)
        for name, choices in self.CHOICES.items():
            if self.params[name] not in choices:
                raise ValueError(f"detector 'race': {name} must be one of {', '.join(choices)} (the paper's "
                                 f"alternative needs a model haldet does not run for it), not {self.params[name]!r}")
        if not 0.0 < float(self.params["threshold"]) <= 1.0:
            raise ValueError(f"detector 'race': threshold must be in (0, 1], not {self.params['threshold']!r}")

    def signals(self) -> frozenset[Signal]:
        """The sampled answers' entropies after the primary trace too, when S_CA is read that way."""
        if self.params["alignment"] == "entropy" and self.params["variant"] in ("race", "ca"):
            return self.requires
        return self.requires - {Signal.TRACE_ANSWER_ENTROPIES}

    def score(self, items: SignalView) -> Scores:
        out = Scores.empty(len(items))
        variant = self.params["variant"]
        todo: list[tuple[int, str, str, list[str], list[str]]] = []  # (row, question, answer, answers, traces)
        for i, (inst, gen, resp, raw) in enumerate(zip(items.instances, items.generations,
                                                       items.get(Signal.RESPONSE), items.get(Signal.SAMPLES),
                                                       strict=True)):
            usable = answer_and_samples(resp, raw)
            if isinstance(usable, str):
                out.invalid(i, usable)
                continue
            traces = [r.strip() for a, r in zip(raw, raw.reasoning, strict=True) if a.strip() and r and r.strip()] \
                if isinstance(raw, SampleTexts) else []
            if variant != "aa" and not (gen.reasoning or "").strip():
                out.invalid(i, NO_TRACE)
            elif variant in ("race", "cc") and not traces:
                out.invalid(i, "no sample has a reasoning trace")
            else:
                todo.append((i, inst.question, usable[0], usable[1], traces))
        if not todo:
            return out
        steps = split_many([items.generations[i].reasoning or "" for i, *_ in todo])
        flat = [t for *_, traces in todo for t in traces]  # each sampled trace as the premise its sentences make
        premises = iter(["\n".join(s) or t for s, t in zip(split_many(flat), flat, strict=True)])
        self.meta["sentence_splitter"] = splitter_id()
        parts = {"cc": variant in ("race", "cc"), "aa": variant in ("race", "aa"), "ca": variant in ("race", "ca")}
        entropy = parts["ca"] and self.params["alignment"] == "entropy"
        aligned = items.get(Signal.TRACE_ANSWER_ENTROPIES) if entropy else [None] * len(items)
        nli_pairs: list[tuple[str, str]] = []
        sim_pairs: list[tuple[str, str]] = []
        texts: list[list[str]] = []
        for (_, question, answer, answers, traces), own in zip(todo, steps, strict=True):
            joined = [next(premises) for _ in traces]
            if parts["cc"]:
                nli_pairs += [(premise, step) for step in own for premise in joined]
            if parts["ca"] and own and not entropy:
                nli_pairs += [("\n".join(own), a) for a in answers]
            distinct = sorted({f"{question} [SEP] {a}" for a in [answer, *answers]})
            texts.append(distinct)
            if parts["aa"]:
                sim_pairs += list(combinations(distinct, 2))
        nli = pair_scores(self, "nli", "nli_model", nli_pairs, "race nli pairs") if nli_pairs else np.zeros((0, 3))
        sims = pair_scores(self, "similarity", "embedder", sim_pairs, "race embedding pairs")[:, 0] \
            if sim_pairs else np.zeros(0)
        at_nli = at_sim = 0
        for (row, _, _, answers, traces), own, distinct in zip(todo, steps, texts, strict=True):
            total, why = 0.0, ""
            if parts["cc"]:
                n = len(own) * len(traces)
                if not own:
                    why = "no sentence in the reasoning trace"
                else:  # w_j = 1 / m: the mean over steps of the mean over sampled traces
                    total += float(contradiction_ratio(nli[at_nli : at_nli + n]).reshape(len(own), -1).mean())
                at_nli += n
            if entropy:
                values = np.asarray(aligned[row] if aligned[row] is not None else [], dtype=np.float64)
                if np.isfinite(values).any():
                    total += float(np.nanmean(values))
                else:
                    why = "no sampled answer was read after the trace (TRACE_ANSWER_ENTROPIES missing)"
            elif parts["ca"]:
                if own:
                    total += float(contradiction_ratio(nli[at_nli : at_nli + len(answers)]).mean())
                    at_nli += len(answers)
                else:
                    why = "no sentence in the reasoning trace"
            if parts["aa"]:
                m = len(distinct)
                matrix = np.eye(m)
                for a, b in combinations(range(m), 2):
                    matrix[a, b] = matrix[b, a] = sims[at_sim]
                    at_sim += 1
                total += sindex(matrix, float(self.params["threshold"]))
            if why:
                out.invalid(row, why)
            else:
                out.set(row, total)
        return out

