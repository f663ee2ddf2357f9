"""Sentence embeddings of an item's texts as shared evidence: each distinct text is embedded once per encoder and
settings, in process memory (shared by every reader: the bi-encoder similarity pair model, the "embedding" relation
matrices of `haldet.detectors._relations`) and, with a cell directory, in `embeddings/<encoder>.jsonl` (exact
float32, keyed by the encoder's id and settings), so a second process embeds nothing already embedded.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from haldet.store import StageLog, model_slug

_MEMORY: dict[str, dict[str, np.ndarray]] = {}


class Encoder(Protocol):
    """What the store needs of an encoder: the key of its numbers and one call embedding many texts."""

    @property
    def embedding_key(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def kept(key: str) -> dict[str, np.ndarray]:
    """The process-wide text -> embedding map of one encoder and settings (shared by every reader)."""
    return _MEMORY.setdefault(key, {})


def text_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _pack(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode("ascii")


def _unpack(value: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(value), dtype=np.float32).copy()


class EmbeddingStore:
    """Embeddings of texts: process memory, then `<root>/embeddings/<encoder>.jsonl`, then the encoder (one call for
    every text still missing)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self._disk: dict[str, dict[str, Any]] = {}

    def _log(self, key: str) -> StageLog | None:
        return None if self.root is None else StageLog(self.root / "embeddings" / f"{model_slug(key)}.jsonl")

    def vectors(self, encoder: Encoder, texts: Sequence[str]) -> np.ndarray:
        """[len(texts), D] float32 embeddings (each distinct text embedded at most once per encoder and settings)."""
        key = encoder.embedding_key
        memo = kept(key)
        log = self._log(key)
        wanted = [t for t in dict.fromkeys(texts) if t not in memo]
        if wanted and log is not None:
            if key not in self._disk:
                self._disk[key] = {rec["id"]: rec["v"] for rec in log.read(key).values()}
            for t in wanted:
                found = self._disk[key].get(text_id(t))
                if found is not None:
                    memo[t] = _unpack(found)
            wanted = [t for t in wanted if t not in memo]
        if wanted:
            made = encoder.embed(wanted)
            memo.update(zip(wanted, made, strict=True))
            if log is not None:
                records = [{"id": text_id(t), "key": key, "v": _pack(v)} for t, v in zip(wanted, made, strict=True)]
                log.append(records)
                self._disk.setdefault(key, {}).update((r["id"], r["v"]) for r in records)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([memo[t] for t in texts])


def clear_memory() -> None:
    """Forget every kept embedding (tests; a new process starts so)."""
    _MEMORY.clear()
