"""Semantic-similarity pair models, one column in [0, 1].

- `CrossEncoderSimilarity`: a sentence-transformers cross-encoder (default cross-encoder/stsb-distilroberta-base).
- `BiEncoderSimilarity` (name `bi:<model>` or an embedding alias such as `minilm`): cosine of sentence
  embeddings clipped to [0, 1]; the offline stand-in for the cross-encoder. Its embeddings are the shared ones of
  `haldet.models.pairs.embeddings` (one encoding per text for every reader).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from haldet.models.pairs.base import Pair, PairModel, device_name, load_error, local_only
from haldet.models.pairs.embeddings import EmbeddingStore, kept
from haldet.util.assets import resolve_embedding


class CrossEncoderSimilarity(PairModel):
    """sentence-transformers cross-encoder similarity (STS-B models give one value in [0, 1])."""

    kind = "similarity"

    def __init__(self, name: str, *, batch_size: int = 32, max_length: int = 512, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        from sentence_transformers import CrossEncoder

        self.id = f"cross-encoder:{name}"
        try:
            self.model = CrossEncoder(name, device=device_name(device), max_length=max_length,
                                      local_files_only=local_only(name))
        except (OSError, ValueError) as exc:
            raise load_error(name, exc, "cross-encoder") from None

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        scores = self.model.predict([list(p) for p in pairs], batch_size=self.batch_size, show_progress_bar=False)
        return np.clip(np.asarray(scores, dtype=np.float64).reshape(len(pairs), -1)[:, :1], 0.0, 1.0)


MAX_KEPT_EMBEDDINGS = 200_000  # texts whose embedding a bi-encoder keeps (~300 MB at MiniLM's width)


class BiEncoderSimilarity(PairModel):
    """Cosine similarity of sentence embeddings, clipped to [0, 1] (negative cosine = unrelated).

    Each distinct text is embedded once per process and encoder settings, in the memory every embedding reader
    shares (`haldet.models.pairs.embeddings`): the pairs of K samples share their texts, and the pair batches of
    `PairCache` would otherwise embed the same text again in every batch it appears in."""

    kind = "similarity"

    def __init__(self, name: str, *, batch_size: int = 64, device: str = "auto") -> None:
        super().__init__(name, batch_size=batch_size)
        from sentence_transformers import SentenceTransformer

        self.id = f"bi-encoder:{name}"
        path = resolve_embedding(name)
        try:
            self.model = SentenceTransformer(path, device=device_name(device), local_files_only=local_only(path))
        except (OSError, ValueError) as exc:
            raise load_error(name, exc, "sentence encoder") from None
        self.store = EmbeddingStore(None)  # process memory only until a pair cache names its cell (`use_cell`)

    @property
    def embedding_key(self) -> str:
        """What keys its embeddings: the model's id (with its files' fingerprint), normalised, its max length."""
        return f"{self.id}:normalized:msl{self.model.max_seq_length}"

    @property
    def embeddings(self) -> dict[str, np.ndarray]:
        """The kept text -> embedding map, shared with every reader of this encoder's embeddings."""
        return kept(self.embedding_key)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The one encoder call: unit-length float32 embeddings of `texts`."""
        return np.asarray(self.model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                            convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)

    def use_cell(self, root: Path | None) -> None:
        if self.store.root != root:  # the cell's embeddings log, shared with the embedding relation matrices
            self.store = EmbeddingStore(root)

    def prepare(self, pairs: Sequence[Pair]) -> None:
        kept_now = self.embeddings
        wanted = sorted({t for p in pairs for t in p})
        if len(kept_now) + sum(t not in kept_now for t in wanted) > MAX_KEPT_EMBEDDINGS:  # a long process: bounded
            kept_now.clear()
        self.store.vectors(self, wanted)

    def compute(self, pairs: Sequence[Pair]) -> np.ndarray:
        self.prepare(pairs)
        kept_now = self.embeddings
        a = np.stack([kept_now[p[0]] for p in pairs])
        b = np.stack([kept_now[p[1]] for p in pairs])
        return np.clip((a * b).sum(-1).astype(np.float64), 0.0, 1.0)[:, None]
