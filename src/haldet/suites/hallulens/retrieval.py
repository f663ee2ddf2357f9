"""Evidence for LongWiki claim verification: passages of the user's page file, ranked by embedding similarity.

Pages in scope for a claim are the page the question was written from plus every page whose title occurs in the
question (a title match stands in for the paper's NER-based page search). Each page is cut into passages of 256
tokens (MiniLM tokenizer offsets); the query is "<page title>: <claim>", a passage is embedded as
"<page title>: <passage>", and the top 5 by cosine similarity (packaged MiniLM, normalised embeddings) are the
evidence. Page embeddings are computed once per process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from haldet.suites.hallulens.sources import Page, minilm_tokenizer
from haldet.util.assets import resolve_embedding


@dataclass(frozen=True)
class Passage:
    title: str
    text: str


class PassageIndex:
    def __init__(self, pages: Sequence[Page], *, encoder: str = "minilm", passage_tokens: int = 256,
                 top_k: int = 5) -> None:
        self.pages = {p.title: p for p in pages}
        self.encoder_name = encoder
        self.passage_tokens = passage_tokens
        self.top_k = top_k
        self._model: Any = None
        self._cache: dict[str, tuple[list[Passage], np.ndarray]] = {}

    def fingerprint(self) -> list[Any]:
        return ["passages", self.encoder_name, self.passage_tokens, self.top_k]

    @property
    def model(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            path = resolve_embedding(self.encoder_name)
            self._model = SentenceTransformer(path, device="cpu")
        return self._model

    def _embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                            show_progress_bar=False))

    def passages(self, title: str) -> tuple[list[Passage], np.ndarray]:
        if title not in self._cache:
            doc = self.pages[title].document
            enc = minilm_tokenizer()(doc, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            offsets = enc["offset_mapping"]
            chunks = []
            for start in range(0, len(offsets), self.passage_tokens):
                window = offsets[start:start + self.passage_tokens]
                chunks.append(Passage(title, doc[window[0][0]:window[-1][1]].strip()))
            chunks = [c for c in chunks if c.text]
            emb = self._embed([f"{title}: {c.text}" for c in chunks]) if chunks else np.zeros((0, 1))
            self._cache[title] = (chunks, emb)
        return self._cache[title]

    def scope(self, title: str, question: str) -> list[str]:
        """The question's own page plus pages named in the question (titles of 4+ characters)."""
        low = question.lower()
        named = sorted(t for t in self.pages if t != title and len(t) >= 4 and t.lower() in low)
        return ([title] if title in self.pages else []) + named

    def top(self, title: str, question: str, claim: str) -> list[Passage]:
        pool: list[Passage] = []
        vectors = []
        for t in self.scope(title, question):
            chunks, emb = self.passages(t)
            pool += chunks
            if len(chunks):
                vectors.append(emb)
        if not pool:
            return []
        query = self._embed([f"{title}: {claim}"])[0]
        sims = np.concatenate(vectors) @ query
        order = sorted(range(len(pool)), key=lambda i: (-float(sims[i]), i))[: self.top_k]
        return [pool[i] for i in order]
