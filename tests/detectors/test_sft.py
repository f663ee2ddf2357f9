"""SFT: LoRA fine-tuning of the embedded SmolLM2-135M-Instruct as a hallucination classifier, on CPU, a few items:
training lowers the loss and separates the training answers (the adapter's save / reload round trip is checked by
the conformance suite on a tiny Llama)."""

from __future__ import annotations

import numpy as np

from haldet.datasets.base import get_adapter
from haldet.detectors.sft import SFT
from haldet.schema import Category, Generation
from haldet.signals import Signal, SignalView


def _view(instances, labelled: bool) -> SignalView:
    gens = [Generation(id=i.id, prompt="", response=i.response or "", token_ids=[], token_logprobs=[],
                       finish_reason="stop", n_tokens=0, model="given") for i in instances]
    labels = [int(i.response_label == Category.HALLUCINATION) for i in instances] if labelled else None

    def load(signal: Signal, ids):
        assert signal is Signal.RESPONSE
        by_id = {g.id: g.response for g in gens}
        return [by_id[i] for i in ids]

    return SignalView(ids=[i.id for i in instances], instances=list(instances), generations=gens, loader=load,
                      labels=None if labels is None else np.asarray(labels))


def test_lora_sft_on_the_embedded_model_learns_its_training_items() -> None:
    items, _ = get_adapter("halueval_qa_pairs", None, {"rows": 5}).load(limit=None)  # 5 right + 5 hallucinated
    # short rows (the head and the last 40 tokens: the answer and the reply marker) keep it CPU-cheap
    det = SFT(epochs=2, lr=2e-3, batch_size=5, max_length=40)
    det.fit(_view(items, True), None)
    assert det.fit_info["n_train"] == 10 and det.fit_info["steps"] == 4
    assert det.fit_info["last_loss"] < det.fit_info["first_loss"]
    assert any(k.endswith("lora_A.weight") for k in det.adapter) and det.params["r"] == 16
    scores = det.score(_view(items, False)).values
    y = np.array([i.response_label == Category.HALLUCINATION for i in items])
    assert np.isfinite(scores).all()
    # the untuned model (0 epochs: the adapter's zero update) separates them less than the tuned one
    base = SFT(epochs=0, batch_size=5, max_length=40)
    base.fit(_view(items, True), None)
    before = base.score(_view(items, False)).values
    assert scores[y].mean() - scores[~y].mean() > before[y].mean() - before[~y].mean() + 0.05
