"""Sentence embeddings as shared pairwise evidence: two detectors reading embedding similarity (SAR through the
bi-encoder pair model, CoCoA through the "embedding" relation matrix) embed each distinct text once between them,
and a second process over the same cell directory embeds none (the cell's `embeddings/` log and pair cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from haldet.detectors import _relations
from haldet.detectors.base import DETECTORS
from haldet.models.pairs import cache, embeddings, loader
from haldet.models.pairs.similarity import BiEncoderSimilarity
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView

ANSWERS = ["Paris is the capital of France.", "The Nile is in Africa."]
SAMPLES = [["Paris.", "It is Paris.", "Lyon, I think."], ["The Nile.", "Paris.", "It flows through Egypt."]]


def view() -> SignalView:
    ids = [f"t/test/{i}" for i in range(2)]
    lps = [[-0.2, -0.5, -0.1], [-1.0, -0.3]]
    values: dict[Signal, list[Any]] = {
        Signal.RESPONSE: ANSWERS, Signal.SAMPLES: SAMPLES, Signal.TOKEN_LOGPROBS: [np.array(lp) for lp in lps],
        Signal.SAMPLE_LOGLIKS: [np.array([[-1.0, 2.0], [-2.0, 3.0], [-4.0, 4.0]])] * 2}
    inst = [Instance(id=i, dataset="t", scenario="qa_open", task_type="short_answer", question="Where?") for i in ids]
    gens = [Generation(id=i, prompt="p", response=a, token_ids=list(range(len(lp))), token_logprobs=lp,
                       finish_reason="stop", n_tokens=len(lp), model="m") for i, a, lp in zip(ids, ANSWERS, lps,
                                                                                             strict=True)]
    return SignalView(ids=ids, instances=inst, generations=gens,
                      loader=lambda s, wanted: [values[s][ids.index(i)] for i in wanted])


def forget() -> None:
    """What a new process starts without: every in-memory embedding, relation matrix and pair value."""
    embeddings.clear_memory()
    _relations.clear_memory()
    cache._MEMORY.clear()


def readers(cell: Path) -> list[Any]:
    sar = DETECTORS.get("sar")(similarity_model="minilm", fallback=None, include_question=False)
    cocoa = DETECTORS.get("cocoa")(similarity="embedding", embedding_model="minilm")
    for det in (sar, cocoa):
        det.workdir = cell
    return [sar, cocoa]


def test_each_text_is_embedded_once_for_every_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[str] = []
    embed = BiEncoderSimilarity.embed

    def counting(self: BiEncoderSimilarity, texts: Any) -> np.ndarray:
        encoded.extend(texts)
        return embed(self, texts)

    monkeypatch.setattr(BiEncoderSimilarity, "embed", counting)
    forget()
    v = view()
    first = [det.score(v).values for det in readers(tmp_path)]
    distinct = set(ANSWERS) | {s for group in SAMPLES for s in group}
    assert sorted(encoded) == sorted(distinct)  # SAR's samples, then CoCoA's answers only: each once
    assert list((tmp_path / "embeddings").glob("*.jsonl"))

    # CoCoA by hand: u = -sum log p, times the mean of 1 - clip(cos(answer, sample)) over the samples
    model, _ = loader.load_pair_model("similarity", "minilm")
    unit = {t: model.model.encode([t], normalize_embeddings=True)[0] for t in distinct}
    for i, answer in enumerate(ANSWERS):
        cos = [min(1.0, max(0.0, float(unit[answer] @ unit[s]))) for s in SAMPLES[i]]
        u = -sum(v.get(Signal.TOKEN_LOGPROBS)[i])
        assert first[1][i] == pytest.approx(u * float(np.mean(1.0 - np.array(cos))), abs=1e-5)

    encoded.clear()
    forget()  # a second process over the same cell directory
    again = [det.score(v).values for det in readers(tmp_path)]
    assert encoded == []
    assert np.array_equal(first[1], again[1])  # CoCoA: the float32 embeddings are kept exactly
    assert first[0] == pytest.approx(again[0], abs=1e-6)  # SAR: its pair cache keeps 7 digits
    forget()
