"""`BERTScorePairs`: the bert-score library's (P, R, F1) of a candidate against a reference, as a pair model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from haldet.models.pairs.base import Pair, PairModel, device_name, load_error, local_only
from haldet.util.assets import resolve_embedding

PAIRS_PER_BERTSCORE_CALL = 1024  # bounds the token embeddings one call keeps (~100 MB at MiniLM's width)


class BERTScorePairs(PairModel):
    """bert-score (P, R, F1) of candidate a against reference b. `num_layers` defaults to the library's table
    for known models and to the last layer for any other encoder (e.g. the packaged MiniLM)."""

    kind = "bertscore"
    width = 3
    columns = ("precision", "recall", "f1")

    def __init__(self, name: str, *, batch_size: int = 64, num_layers: int | None = None,
                 rescale_with_baseline: bool = False, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        from bert_score import BERTScorer
        from bert_score.utils import model2layers
        from transformers import AutoConfig

        path = resolve_embedding(name)
        local = local_only(path)
        try:
            if num_layers is None:
                num_layers = model2layers.get(name) or AutoConfig.from_pretrained(
                    path, local_files_only=local).num_hidden_layers
            if local and not Path(path).exists():
                raise OSError(f"{name} is not available offline")
            self.scorer = BERTScorer(model_type=path, num_layers=num_layers, batch_size=self.batch_size,
                                     device=device_name(device), lang="en" if rescale_with_baseline else None,
                                     rescale_with_baseline=rescale_with_baseline)
        except (OSError, ValueError, KeyError, AssertionError) as exc:
            raise load_error(name, exc, "BERTScore encoder") from None
        self.id = f"bertscore:{name}:L{num_layers}" + (":rescaled" if rescale_with_baseline else "")
        # bert-score embeds each distinct sentence of a call once and batches by `batch_size` itself: a call of many
        # pairs embeds an answer sentence once for all the sample sentences it is matched with
        self.pairs_per_call = max(self.batch_size, PAIRS_PER_BERTSCORE_CALL)

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        p, r, f = self.scorer.score([a for a, _ in pairs], [b for _, b in pairs], batch_size=self.batch_size)
        return np.stack([p.numpy(), r.numpy(), f.numpy()], axis=-1).astype(np.float64)
