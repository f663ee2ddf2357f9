"""SFT (TRIVIA+'s supervised baseline): LoRA fine-tuning of an instruct model as a hallucination classifier.

The model reads a classification prompt (context, question, answer; own wording) and is trained, through LoRA
adapters (peft; rank `r` = 16 as in the paper, alpha 32, dropout 0.05, on the attention projections peft picks
for the architecture), to reply "Yes" when the answer states something the context does not support and "No"
otherwise: cross-entropy on that one reply token, AdamW, `epochs` passes over the training items in seeded
order. The score is P(Yes) / (P(Yes) + P(No)) at the reply position; the suite's threshold comes from validation.
The fitted adapter weights are the saved state, so the scoring path caches them under the detector's key (model,
every parameter, split and training labels) and a rerun scores without training. The paper tuned
Mistral-7B-Instruct-v0.2; the default here is the embedded SmolLM2-135M-Instruct (any hub id, local path or alias
the hf backend loads).

TRIVIA+'s procedure (appendix A.2), each a parameter: `max_length: null` reads whole contexts (up to the model's
window, where a longer item keeps its head and its end, as any cut here); `drop_longest` leaves the longest share of
the training items out of training (the paper: 16.13%); `eval_every: N` scores the validation items every N steps
(and at the end) and keeps the adapter with the best validation AUROC (the paper: every 100 steps), `fit_info`
saying which step won. Without labelled validation items the last adapter is kept, and `fit_info` says why.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

import numpy as np

from haldet.backends.hf.backend import HFBackend
from haldet.detectors.base import Detector, Scores, register
from haldet.detectors.probe_training import training_problem
from haldet.evaluation.metrics import auroc
from haldet.schema import Instance
from haldet.signals import Signal, SignalView

QUESTION = ("Read the context, the question and the answer below. Does the answer state anything that the context "
            "does not support or that contradicts it? Reply with Yes or No only.")
POSITIVE, NEGATIVE = "Yes", "No"


def classifier_messages(inst: Instance, response: str) -> list[dict[str, str]]:
    parts = [QUESTION, f"Context: {inst.context.strip()}" if inst.context.strip() else "",
             f"Question: {inst.question.strip()}", f"Answer: {response.strip()}"]
    return [{"role": "user", "content": "\n\n".join(p for p in parts if p)}]


@register("sft")
class SFT(Detector):
    method_family = "judges and verifiers"
    paper = "a fine-tuned LLM judge (TRIVIA+'s SFT detector)"
    peers = ()
    requires = frozenset({Signal.RESPONSE})
    trains = True
    version = "1"
    auxiliary: ClassVar[dict[str, str]] = {"model": "causal_lm"}
    defaults: ClassVar[dict[str, Any]] = {"model": "smollm2-135m", "r": 16, "lora_alpha": 32, "lora_dropout": 0.05,
                                          "epochs": 2, "lr": 2e-4, "batch_size": 4, "max_length": 512, "seed": 42,
                                          "device": "auto", "drop_longest": 0.0, "eval_every": None}
    _UNSAVED: ClassVar[frozenset[str]] = Detector._UNSAVED | {"_lm"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.adapter: dict[str, np.ndarray] | None = None
        self.problem: str | None = None
        self.fit_info: dict[str, Any] = {}
        self._lm: Any = None

    # --- the model ----------------------------------------------------------------------------------------------
    def _model(self) -> Any:
        """(backend, peft model, label token ids), built once per instance; the saved adapter loaded when fitted."""
        if self._lm is None:
            import torch
            from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

            p = self.params
            backend = HFBackend(str(p["model"]), device=str(p["device"]))
            torch.manual_seed(int(p["seed"]))
            config = LoraConfig(r=int(p["r"]), lora_alpha=int(p["lora_alpha"]), lora_dropout=float(p["lora_dropout"]),
                                task_type="CAUSAL_LM")
            model = get_peft_model(backend.model, config)
            if self.adapter is not None:
                set_peft_model_state_dict(model, {k: torch.from_numpy(v) for k, v in self.adapter.items()})
            words = [backend.encode_text(w) for w in (POSITIVE, NEGATIVE)]
            if any(not w for w in words) or words[0][0] == words[1][0]:
                raise ValueError(f"model {p['model']}: {POSITIVE!r} and {NEGATIVE!r} do not start with distinct tokens")
            self._lm = (backend, model, [words[0][0], words[1][0]])
        return self._lm

    def _encode(self, backend: Any, inst: Instance, response: str) -> list[int]:
        ids = backend.encode_prompt(backend.render_chat(classifier_messages(inst, response)))
        limit = int(self.params["max_length"] or backend.window())  # null: the whole item, up to the window
        return ids if len(ids) <= limit else ids[:2] + ids[len(ids) - limit + 2:]  # keep the head and the question

    def _reply_logits(self, model: Any, batch: list[list[int]], pad: int) -> Any:
        """[B, V] logits at each row's reply position (rows left-padded)."""
        import torch

        width = max(len(r) for r in batch)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in batch], device=model.device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in batch], device=model.device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)  # each row's own positions: padding never shifts a score
        return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1, :].float()

    # --- fit and score ------------------------------------------------------------------------------------------
    def fit(self, train: SignalView, val: SignalView | None) -> None:
        import torch
        from peft import get_peft_model_state_dict

        self.adapter, self.problem = None, None
        responses = train.get(Signal.RESPONSE)
        labels = None if train.labels is None else np.asarray(train.labels)
        keep = [i for i, r in enumerate(responses) if r and (labels is None or np.isfinite(labels[i]))]
        self.problem = training_problem(None if labels is None else labels[keep].astype(int))
        if self.problem is not None or labels is None:  # no labels is a training problem
            return
        self._lm = None
        backend, model, words = self._model()
        pad = backend.tokenizer.pad_token_id or 0
        data = [(self._encode(backend, train.instances[i], responses[i]), int(labels[i])) for i in keep]
        n_drop = round(float(self.params["drop_longest"]) * len(data))
        if n_drop:  # the longest training items are left out (TRIVIA+: 16.13%), ties by position
            longest = set(sorted(range(len(data)), key=lambda j: (-len(data[j][0]), j))[:n_drop])
            data = [d for j, d in enumerate(data) if j not in longest]
        every = self.params["eval_every"]
        val_set = self._val_set(backend, val) if every else None
        best: tuple[float, int, dict[str, Any]] | None = None
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=float(self.params["lr"]))
        rng = random.Random(int(self.params["seed"]))
        size = int(self.params["batch_size"])
        target = torch.tensor(words, device=model.device)
        model.train()
        losses = []
        advance = self.progress("SFT (LoRA) training", int(self.params["epochs"]) * len(data))
        for _ in range(int(self.params["epochs"])):
            order = list(range(len(data)))
            rng.shuffle(order)
            for start in range(0, len(order), size):
                chunk = [data[j] for j in order[start:start + size]]
                logits = self._reply_logits(model, [ids for ids, _ in chunk], pad)
                # label 1 (hallucinated) -> "Yes", label 0 -> "No"
                y = torch.tensor([0 if lab == 1 else 1 for _, lab in chunk], device=model.device)
                loss = torch.nn.functional.cross_entropy(logits, target[y])
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
                advance(len(chunk))
                if val_set and len(losses) % int(every) == 0:
                    best = self._keep_best(model, val_set, pad, words, len(losses), best)
        model.eval()
        if val_set:
            best = self._keep_best(model, val_set, pad, words, len(losses), best)
        state = get_peft_model_state_dict(model)
        self.adapter = ({k: v.detach().float().cpu().numpy() for k, v in state.items()} if best is None
                        else best[2])
        if best is not None:  # the model scores with the kept adapter, not the last step's
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(model, {k: torch.from_numpy(v).to(model.device) for k, v in best[2].items()})
        self.fit_info = {"n_train": len(data), "dropped_longest": n_drop, "steps": len(losses),
                         "first_loss": losses[0] if losses else None,
                         "last_loss": losses[-1] if losses else None}  # epochs 0: the untuned model (a baseline)
        if every:
            self.fit_info.update({"best_step": best[1], "best_val_auroc": best[0]} if best else
                                 {"best_step": None, "note": "no labelled validation items of both classes: "
                                                             "the last adapter is kept"})

    def _val_set(self, backend: Any, val: SignalView | None) -> tuple[list[list[int]], np.ndarray] | None:
        """The labelled validation items, encoded, for the checkpoint choice (None without both classes)."""
        if val is None or val.labels is None:
            return None
        responses, labels = val.get(Signal.RESPONSE), np.asarray(val.labels, dtype=float)
        keep = [i for i, r in enumerate(responses) if r and np.isfinite(labels[i])]
        y = labels[keep].astype(int)
        if len(set(y.tolist())) < 2:
            return None
        return [self._encode(backend, val.instances[i], responses[i]) for i in keep], y

    def _keep_best(self, model: Any, val_set: tuple[list[list[int]], np.ndarray], pad: int, words: list[int],
                   step: int, best: tuple[float, int, dict[str, Any]] | None) -> tuple[float, int, dict[str, Any]]:
        """The better of `best` and the current adapter by validation AUROC (an earlier step wins a tie)."""
        import torch
        from peft import get_peft_model_state_dict

        seqs, y = val_set
        size = int(self.params["batch_size"])
        model.eval()
        with torch.no_grad():
            p = [float(v) for start in range(0, len(seqs), size)
                 for v in torch.log_softmax(self._reply_logits(model, seqs[start:start + size], pad)[:, words],
                                            dim=-1)[:, 0].exp().tolist()]
        model.train()
        score = float(auroc(y, np.asarray(p)))
        if best is not None and score <= best[0]:
            return best
        # a copy: a CPU float32 tensor's numpy() shares the parameter's memory, which later steps would change
        state = {k: v.detach().float().cpu().numpy().copy() for k, v in get_peft_model_state_dict(model).items()}
        return score, step, state

    def score(self, items: SignalView) -> Scores:
        import torch

        out = Scores.empty(len(items))
        if self.problem is not None or self.adapter is None:
            for i in range(len(items)):
                out.invalid(i, f"not fitted: {self.problem or 'no adapter'}")
            return out
        backend, model, words = self._model()
        pad = backend.tokenizer.pad_token_id or 0
        responses = items.get(Signal.RESPONSE)
        todo = [i for i, r in enumerate(responses) if r]
        for i in set(range(len(items))) - set(todo):
            out.invalid(i, "empty answer")
        size = int(self.params["batch_size"])
        model.eval()
        with torch.no_grad():
            for start in range(0, len(todo), size):
                idx = todo[start:start + size]
                logits = self._reply_logits(model, [self._encode(backend, items.instances[i], responses[i])
                                                    for i in idx], pad)
                pair = torch.log_softmax(logits[:, words], dim=-1)[:, 0].exp()
                for i, p in zip(idx, pair.tolist(), strict=True):
                    out.set(i, float(p))
        return out
