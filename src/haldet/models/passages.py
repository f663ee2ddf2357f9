"""Evidence for claim verification: passages of a knowledge source (pages of {title, document}) ranked for a claim,
by embedding similarity (`PassageIndex`, HalluLens's LongWiki retrieval) or by BM25 (`BM25Index`).

Shared by HalluLens's LongWiki judge and the longform suite's verifier labels, so both retrieve the same way. Pages
in scope for a claim are the page the question was written from plus every page whose title occurs in the question
(a title match stands in for the paper's NER-based page search). Each page is cut into passages of 256 tokens
(MiniLM tokenizer offsets). Embedding: the query is "<page title>: <claim>", a passage is embedded as
"<page title>: <passage>", and the top 5 by cosine similarity (packaged MiniLM, normalised embeddings) are the
evidence; page embeddings are computed once per process. BM25 (Okapi; k1 = 1.5, b = 0.75, idf log(1 + (N - n + 0.5)
/ (n + 0.5)), N and n over the passages in scope): the claim's lower-cased word tokens against the passages', no
model at all.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from haldet.util.assets import resolve_embedding


class PageLike(Protocol):
    @property
    def title(self) -> str: ...
    @property
    def document(self) -> str: ...


@dataclass(frozen=True)
class Passage:
    title: str
    text: str


@lru_cache(maxsize=1)
def minilm_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_embedding("minilm"), local_files_only=True)


def chunk(title: str, doc: str, passage_tokens: int) -> list[Passage]:
    """The page cut into passages of `passage_tokens` MiniLM tokens (empty ones dropped)."""
    enc = minilm_tokenizer()(doc, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    offsets = enc["offset_mapping"]
    chunks = []
    for start in range(0, len(offsets), passage_tokens):
        window = offsets[start:start + passage_tokens]
        chunks.append(Passage(title, doc[window[0][0]:window[-1][1]].strip()))
    return [c for c in chunks if c.text]


class PassageIndex:
    """Embedding retrieval (HalluLens LongWiki)."""

    method = "embedding"

    def __init__(self, pages: Sequence[PageLike], *, encoder: str = "minilm", passage_tokens: int = 256,
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
            chunks = chunk(title, self.pages[title].document, self.passage_tokens)
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


_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def bm25_scores(query: Sequence[str], docs: Sequence[Sequence[str]], *, k1: float = 1.5,
                b: float = 0.75) -> np.ndarray:
    """Okapi BM25 of each tokenised doc for the tokenised query (idf over `docs`; a query word repeated counts
    once per occurrence)."""
    n_docs = len(docs)
    if not n_docs:
        return np.zeros(0)
    lengths = np.array([len(d) for d in docs], dtype=float)
    avg = float(lengths.mean()) or 1.0
    counts = [Counter(d) for d in docs]
    out = np.zeros(n_docs)
    for term in query:
        tf = np.array([c[term] for c in counts], dtype=float)
        n = float((tf > 0).sum())
        idf = np.log(1.0 + (n_docs - n + 0.5) / (n + 0.5))
        out += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths / avg))
    return out


class BM25Index(PassageIndex):
    """BM25 retrieval over the same passages and scope (no encoder model)."""

    method = "bm25"

    def fingerprint(self) -> list[Any]:
        return ["passages-bm25", self.passage_tokens, self.top_k]

    def passages(self, title: str) -> tuple[list[Passage], np.ndarray]:
        if title not in self._cache:
            self._cache[title] = (chunk(title, self.pages[title].document, self.passage_tokens), np.zeros((0, 1)))
        return self._cache[title]

    def top(self, title: str, question: str, claim: str) -> list[Passage]:
        pool = [p for t in self.scope(title, question) for p in self.passages(t)[0]]
        scores = bm25_scores(words(claim), [words(p.text) for p in pool])
        order = sorted(range(len(pool)), key=lambda i: (-float(scores[i]), i))[: self.top_k]
        return [pool[i] for i in order]


def passage_index(method: str, pages: Sequence[PageLike], **kwargs: Any) -> PassageIndex:
    """The index of `method` (`embedding` or `bm25`) over `pages`."""
    return {"embedding": PassageIndex, "bm25": BM25Index}[method](pages, **kwargs)
