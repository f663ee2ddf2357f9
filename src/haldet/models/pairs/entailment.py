"""Entailment (NLI) pair models, three columns in `NLI_COLUMNS` order (entailment, neutral, contradiction).

- `HFEntailment`: any HF sequence-classification NLI model (default roberta-large-mnli; hub id or local path),
  columns mapped from the model's own label order.
- `LLMEntailment` (name `llm:<model>`): a causal LM asked whether the premise entails the hypothesis; the
  next-token probabilities of the three label words, renormalised, are the three columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from haldet.backends.hf.backend import HFBackend
from haldet.errors import HaldetError
from haldet.models.pairs.base import NLI_COLUMNS, Pair, PairModel, sequence_classifier

# checkpoints whose config leaves the labels generic (LABEL_0, ...): their documented order. SelfCheckGPT's own NLI
# model is a 2-class head (0 entailment, 1 contradiction; no neutral), its P(contradiction) the method's score.
KNOWN_LABELS: dict[str, tuple[str, ...]] = {"potsawee/deberta-v3-large-mnli": ("entailment", "contradiction")}


class HFEntailment(PairModel):
    """An HF sequence-classification NLI model; label order read from its config (id2label), or for a checkpoint
    with generic labels from `KNOWN_LABELS`."""

    kind = "nli"
    width = 3
    columns = NLI_COLUMNS

    def __init__(self, name: str, *, batch_size: int = 16, max_length: int = 512, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        self.id = f"hf-nli:{name}"
        self.max_length = max_length
        self.tokenizer, self.model, self.device = sequence_classifier(name, "NLI model", device)
        self.index = self._label_index(self.model.config.id2label, name)

    @staticmethod
    def _label_index(id2label: dict[int, str], name: str) -> list[int | None]:
        """Model column of each of entailment, neutral, contradiction (neutral may be absent: 2-way models)."""
        generic = all(str(label).upper().startswith("LABEL_") for label in id2label.values())
        # the hub id, or a local copy in a folder named like it (offline use)
        known = KNOWN_LABELS.get(name) or next((v for k, v in KNOWN_LABELS.items()
                                                if Path(name).name == k.rsplit("/", 1)[-1]), None)
        if generic and known is not None and len(known) == len(id2label):
            id2label = dict(enumerate(known))
        found: dict[str, int] = {}
        for idx, label in id2label.items():
            low = str(label).lower()
            for col in NLI_COLUMNS:
                if low.startswith(col[:6]):
                    found[col] = int(idx)
        if "entailment" not in found or "contradiction" not in found:
            raise HaldetError(f"NLI model {name!r} has labels {sorted(map(str, id2label.values()))}, not "
                              "entailment/neutral/contradiction", where="detector_params (nli_model)",
                              hint="use an MNLI-style model whose config names its labels")
        return [found.get(col) for col in NLI_COLUMNS]

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        import torch

        enc = self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True,
                             max_length=self.max_length, padding=True, return_tensors="pt")
        with torch.inference_mode():
            logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits.float()
        probs = torch.softmax(logits, dim=-1).cpu().numpy().astype(np.float64)
        out = np.zeros((len(pairs), 3))
        for col, idx in enumerate(self.index):
            if idx is not None:
                out[:, col] = probs[:, idx]
        return out


NLI_PROMPT = (
    "Read the premise and the hypothesis.\n\n"
    "Premise: {premise}\n"
    "Hypothesis: {hypothesis}\n\n"
    "If the premise is true, must the hypothesis be true as well? Reply with one word: entailment (it must be "
    "true), contradiction (it must be false), or neutral (it could be either)."
)
NLI_WORDS = ("entailment", "neutral", "contradiction")


class LLMEntailment(PairModel):
    """Entailment from a causal LM: next-token probabilities of the three label words after an NLI question,
    renormalised over the three. Works with any model `HFBackend` loads (embedded aliases included)."""

    kind = "nli"
    width = 3
    columns = NLI_COLUMNS
    words: tuple[str, ...] = NLI_WORDS
    prompt = NLI_PROMPT
    id_prefix = "llm-nli"

    def __init__(self, name: str, *, batch_size: int = 8, max_length: int = 1024, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)

        self.id = f"{self.id_prefix}:{name}"
        self.max_length = max_length
        self.backend = HFBackend(name, device=device)
        self.candidates = self._candidate_ids()

    def _candidate_ids(self) -> list[list[int]]:
        """Token ids that start each label word (with and without a leading space, any capitalisation)."""
        tok = self.backend.tokenizer
        out: list[list[int]] = []
        for word in self.words:
            ids = {tok(v, add_special_tokens=False).input_ids[0]
                   for v in (word, word.capitalize(), " " + word, " " + word.capitalize())}
            out.append(sorted(ids))
        flat = [i for ids in out for i in ids]
        if len(flat) != len(set(flat)):
            raise HaldetError(f"the label words share first tokens in {self.name}'s vocabulary",
                              where="detector_params (nli_model)", hint="use another model for llm: entailment")
        return out

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        import torch

        be = self.backend
        model = be.model
        seqs = []
        for premise, hypothesis in pairs:
            text = be.render_chat([{"role": "user", "content": self.prompt.format(premise=premise,
                                                                               hypothesis=hypothesis)}])
            seqs.append(be.encode_prompt(text)[-self.max_length:])
        width = max(len(s) for s in seqs)
        pad = be.tokenizer.pad_token_id
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):  # left padding: the next-token position is the last column
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
        positions = (mask.cumsum(-1) - 1).clamp_min(0)  # left padding: real tokens start at position 0
        with torch.inference_mode():
            logits = model(input_ids=ids.to(be.device), attention_mask=mask.to(be.device),
                           position_ids=positions.to(be.device), logits_to_keep=1).logits[:, -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        per_word = torch.stack([torch.logsumexp(logp[:, c], dim=-1) for c in self.candidates], dim=-1)
        return torch.softmax(per_word, dim=-1).cpu().numpy().astype(np.float64)
