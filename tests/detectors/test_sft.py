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


def test_triviaplus_procedure_whole_contexts_longest_dropped_best_validation_step(tiny_smol_llama,
                                                                                 monkeypatch) -> None:
    """TRIVIA+ appendix A.2 as parameters, on a tiny Llama: whole items (max_length null), the longest share of
    the training items left out, the adapter of the best validation AUROC kept (checked at every step here; the
    validation AUROCs are scripted so that the first step wins)."""
    import torch
    from peft import get_peft_model_state_dict

    import haldet.detectors.sft as sft_module
    from haldet.schema import Instance

    def item(k: int, bad: bool, words: int) -> Instance:
        return Instance(id=f"t/train/{k}", dataset="t", scenario="rag", task_type="short_answer",
                        question="Where is the capital?", context=" ".join(["canberra is the capital ."] * words),
                        response="sydney" if bad else "canberra",
                        response_label=Category.HALLUCINATION if bad else Category.CORRECT)

    train = [item(k, k % 2 == 1, 2 + k) for k in range(10)]  # item 9 is the longest, item 8 the next
    val = [item(20 + k, k % 2 == 1, 3) for k in range(2)]
    scripted = iter([0.9, 0.4, 0.8])  # validation AUROC after step 1, step 2, and at the end
    monkeypatch.setattr(sft_module, "auroc", lambda y, s: next(scripted))
    states = []
    keep_best = SFT._keep_best

    def spy(self, model, *args):
        states.append({k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()})
        return keep_best(self, model, *args)

    monkeypatch.setattr(SFT, "_keep_best", spy)
    det = SFT(model=str(tiny_smol_llama), epochs=1, lr=5e-2, batch_size=4, max_length=None, drop_longest=0.2,
              eval_every=1, device="cpu")
    det.fit(_view(train, True), _view(val, True))
    info = det.fit_info
    assert info["dropped_longest"] == 2 and info["n_train"] == 8 and info["steps"] == 2
    assert (info["best_step"], info["best_val_auroc"]) == (1, 0.9)
    # the kept adapter is step 1's, and the model scores with it (not with the last step's weights)
    key = next(iter(det.adapter))
    assert np.allclose(det.adapter[key], states[0][key].numpy()) and not torch.equal(states[0][key], states[-1][key])
    live = get_peft_model_state_dict(det._model()[1])
    assert np.allclose(live[key].detach().numpy(), det.adapter[key])
    # whole items: nothing is cut below the model's window
    backend = det._model()[0]
    assert det._encode(backend, train[9], "sydney") == backend.encode_prompt(
        backend.render_chat([{"role": "user", "content": _message(train[9])}]))
    assert det._val_set(backend, None) is None  # no labelled validation items: the last adapter is kept


def _message(inst) -> str:
    from haldet.detectors.sft import classifier_messages

    return classifier_messages(inst, "sydney")[0]["content"]
