"""Claim labels by NLI against a reference text, offline: each claim checked against the passages of the item's
reference (its `references`, else its `context`) most like it.

The reference (a Wikipedia page, the item's documents) is cut into passages of a few sentences; the `passages`
passages sharing the most content words with the claim are the premises (a lexical retrieval, no index), and an NLI
pair model (`haldet.models.pairs`, the same models the consistency detectors use) reads (passage, claim). The claim is
**supported** (correct) when some passage's most likely class is entailment; otherwise **not supported**
(hallucination), whether a passage contradicts it or none says anything about it: FActScore's reading, where a fact
the knowledge source does not support counts as not supported. Each labelled claim records its source
in `meta.labels` (hidden from detectors): `source` "nli:<model id>", the best entailment and contradiction
probabilities and the passage; the data's own label, when there was one, is kept as `data_label` so the two can be
compared (`agreement.label_agreement`). A claim of an item without reference text keeps its label (none for an
extracted claim).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from haldet.models.pairs.base import NLI_COLUMNS
from haldet.models.pairs.cache import PairCache
from haldet.models.pairs.loader import load_pair_model
from haldet.schema import LABEL_META, Category, Instance, SpanLabel
from haldet.text.claim_spans import content_words, sentence_spans

ENTAIL, CONTRA = NLI_COLUMNS.index("entailment"), NLI_COLUMNS.index("contradiction")


def reference_text(instance: Instance) -> str:
    """The text claims are checked against: the item's references, else its context."""
    return "\n\n".join(r for r in instance.references if r.strip()) or instance.context


def passages(text: str, sentences: int = 3) -> list[str]:
    """The reference cut into passages of `sentences` consecutive sentences."""
    spans = sentence_spans(text)
    return [text[spans[i][0] : spans[min(i + sentences, len(spans)) - 1][1]]
            for i in range(0, len(spans), sentences)]


def closest(claim: str, texts: Sequence[str], k: int) -> list[int]:
    """Indices of the `k` texts sharing the most distinct content words with `claim` (ties: earlier first)."""
    words = set(content_words(claim))
    overlap = [len(words & set(content_words(t))) for t in texts]
    return sorted(range(len(texts)), key=lambda i: (-overlap[i], i))[:k]


def label_claims(instances: Sequence[Instance], *, model: str, fallback: str | None = None, k: int = 3,
                 sentences: int = 3, level: str = "claim", cache: Any = None) -> tuple[list[Instance], dict[str, Any]]:
    """The instances with every unit of kind `level` labelled by NLI against the item's reference text, and what
    ran (`meta` of the pair model, pairs computed). `cache`: a folder for the pair cache (a rerun reads it)."""
    nli, meta = load_pair_model("nli", model, fallback=fallback)
    jobs: list[tuple[int, int, list[str]]] = []  # (instance, unit, its premises)
    for i, inst in enumerate(instances):
        chunks = passages(reference_text(inst), sentences)
        if not chunks:
            continue
        for u, unit in enumerate(inst.units):
            if unit.kind == level:
                claim = str(unit.meta.get("claim") or unit.text)
                jobs.append((i, u, [chunks[j] for j in closest(claim, chunks, k)]))
    pairs = [(premise, str(instances[i].units[u].meta.get("claim") or instances[i].units[u].text))
             for i, u, premises in jobs for premise in premises]
    probs = PairCache(cache).scores(nli, pairs) if pairs else np.zeros((0, len(NLI_COLUMNS)))
    out = [inst.model_copy(update={"units": list(inst.units)}) for inst in instances]
    row = 0
    source = f"nli:{meta['used']}"
    for i, u, premises in jobs:
        p = probs[row : row + len(premises)]
        row += len(premises)
        supported = bool((p.argmax(axis=1) == ENTAIL).any())
        best = int(p[:, ENTAIL].argmax())
        claim_unit: SpanLabel = out[i].units[u]
        labels = dict(claim_unit.meta.get(LABEL_META) or {})
        if claim_unit.binary is not None and labels.get("source") == "data":
            labels["data_label"] = claim_unit.binary
        labels.update({"source": source, "p_entail": float(p[:, ENTAIL].max()),
                       "p_contradict": float(p[:, CONTRA].max()), "evidence": premises[best]})
        out[i].units[u] = claim_unit.model_copy(update={
            "category": Category.CORRECT if supported else Category.HALLUCINATION,
            "meta": {**claim_unit.meta, LABEL_META: labels}})
    return out, {**meta, "pairs": len(pairs), "claims": len(jobs), "k": k, "sentences": sentences}

