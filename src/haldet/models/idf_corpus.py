"""Focus's IDF table from any corpus: a Hugging Face hub dataset streamed (`hf:ID`, the `datasets` library's
streaming mode: nothing but the documents counted is downloaded) or local files (`.txt`: one document per line;
`.jsonl`: one JSON object per line, its `text_field` the document), counted with a progress bar into a table file.

The HalluEntity paper (after Focus) counts 1M RedPajama documents: `PAPER_CORPUS` with `PAPER_DOCUMENTS`, which
needs the hub. A table file (`.npz`) holds the document frequency of every token id of one tokenizer and a JSON
record of what made it (`TABLE_FORMAT`, the corpus: hub id, split, text field and document cap, or each file's
SHA-256; the tokenizer; the documents counted); `table_identity` is that record, which goes into the Focus
detector's identity, so another corpus, tokenizer or count never answers for this one. `haldet detectors idf`
builds one; Focus reads it with `idf_table: FILE`, or builds one into the user cache from `idf_corpus: hf:ID` /
local files on first use. A corpus that cannot be read, or yields no document, is one `HaldetError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from haldet.backends.hf.loading import load_tokenizer
from haldet.config import digest
from haldet.errors import HaldetError
from haldet.models.idf import (  # IDF_FORMULAS: Focus reads its formulas and tables in one import
    IDF_FORMULAS,
    IDF_VERSION,
    IDFTable,
    corpus_identity,
    document_frequencies,
    idf_table,
)
from haldet.store import model_slug
from haldet.util.assets import cache_dir, file_sha256

HUB_PREFIX = "hf:"
__all__ = ["IDF_FORMULAS", "CorpusSource", "build_table", "focus_idf_identity", "focus_table", "read_table",
           "table_identity"]
PAPER_CORPUS = "hf:togethercomputer/RedPajama-Data-1T-Sample"  # RedPajama's sample, as the Focus code reads
PAPER_DOCUMENTS = 1_000_000  # HalluEntity section 4 / Focus: IDF over 1M RedPajama documents
TABLE_FORMAT = "haldet-idf-table-1"
Progress = Callable[[str, int], Callable[[int], None]]


@dataclass(frozen=True)
class CorpusSource:
    """Where the documents come from: a hub dataset (`hub`) or local files (`files`), with the split and text field
    read and the most documents counted (`limit`; None = all)."""

    hub: str | None
    files: tuple[Path, ...] = ()
    split: str = "train"
    text_field: str = "text"
    limit: int | None = None

    @classmethod
    def parse(cls, corpus: str | Sequence[str], *, split: str = "train", text_field: str = "text",
              limit: int | None = None, where: str = "corpus") -> CorpusSource:
        """`hf:ID` alone, or one or more local .txt / .jsonl files; anything else is one error naming `where`."""
        specs = [corpus] if isinstance(corpus, str) else list(corpus)
        if limit is not None and limit < 1:
            raise HaldetError(f"the document cap must be at least 1, not {limit}", where=where)
        hub = [s for s in specs if str(s).startswith(HUB_PREFIX)]
        if hub:
            if len(specs) != 1 or not hub[0][len(HUB_PREFIX):]:
                raise HaldetError(f"a hub corpus is one dataset id alone, not {specs}", where=where,
                                  hint=f"e.g. {PAPER_CORPUS}")
            return cls(hub[0][len(HUB_PREFIX):], (), split, text_field, limit)
        if not specs:
            raise HaldetError("no corpus given", where=where, hint=f"{PAPER_CORPUS}, or .txt / .jsonl files")
        files = tuple(Path(s).expanduser() for s in specs)
        for path in files:
            if not path.is_file():
                raise HaldetError(f"IDF corpus file not found: {path}", where=where,
                                  hint=f"give .txt (one document per line) or .jsonl (field {text_field!r}) files, "
                                       f"or a hub dataset as {PAPER_CORPUS}")
            if path.suffix not in (".txt", ".jsonl"):
                raise HaldetError(f"IDF corpus file {path} is neither .txt nor .jsonl", where=where,
                                  hint="one document per line (.txt), or one JSON object per line (.jsonl)")
        return cls(None, files, split, text_field, limit)

    def identity(self) -> dict[str, Any]:
        """What the counts depend on: the hub id, split, field and cap, or each file's content hash (and cap)."""
        if self.hub is not None:
            return {"corpus": f"{HUB_PREFIX}{self.hub}", "split": self.split, "text_field": self.text_field,
                    "limit": self.limit}
        return {"corpus": "files", "files": [{"name": p.name, "sha256": file_sha256(p)} for p in self.files],
                **({"text_field": self.text_field} if any(p.suffix == ".jsonl" for p in self.files) else {}),
                "limit": self.limit}

    def expected(self) -> int:
        """How many documents the progress bar counts to: the cap, or, for local files, their non-empty lines
        (one quick pass); 0 (a one-line note) for a hub dataset without a cap."""
        if self.hub is not None:
            return self.limit or 0
        lines = 0
        for path in self.files:
            with open(path, encoding="utf-8") as fh:
                lines += sum(1 for line in fh if line.strip())
        return lines if self.limit is None else min(lines, self.limit)

    def documents(self) -> Iterator[str]:
        """The documents in order, at most `limit` of them."""
        stream = self._hub() if self.hub is not None else self._files()
        for n, doc in enumerate(stream):
            if self.limit is not None and n >= self.limit:
                return
            yield doc

    def _hub(self) -> Iterator[str]:
        try:
            import datasets

            rows = datasets.load_dataset(self.hub, split=self.split, streaming=True)
            for row in rows:
                if self.text_field not in row:
                    raise HaldetError(f"hub dataset {self.hub} has no field {self.text_field!r} (it has "
                                      f"{', '.join(sorted(row))})", where="text field",
                                      hint="name the documents' field (--text-field / idf_text_field)")
                yield str(row[self.text_field])
        except HaldetError:
            raise
        except Exception as exc:  # no network, unknown id, gated dataset: the library's own message, shortened
            raise HaldetError(f"cannot stream hub dataset {self.hub} (split {self.split}): "
                              f"{type(exc).__name__}: {str(exc)[:200]}", where="IDF corpus",
                              hint="this corpus needs the Hugging Face hub: build the table where the hub is "
                                   "reachable (`haldet detectors idf`) and pass it as idf_table: FILE, or give "
                                   "local .txt / .jsonl files") from None

    def _files(self) -> Iterator[str]:
        for path in self.files:
            with open(path, encoding="utf-8") as fh:
                for line_no, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    if path.suffix == ".txt":
                        yield line.strip()
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise HaldetError(f"malformed JSON in the IDF corpus: {exc.msg}",
                                          where=f"{path}:{line_no}",
                                          hint="one JSON object per line (.jsonl)") from None
                    if not isinstance(row, dict) or not isinstance(row.get(self.text_field), str):
                        raise HaldetError(f"the IDF corpus line has no text field {self.text_field!r}",
                                          where=f"{path}:{line_no}",
                                          hint="name the documents' field (--text-field / idf_text_field)")
                    yield row[self.text_field]


def build_table(source: CorpusSource, tokenizer_name: str, out: Path, progress: Progress | None = None,
                tokenizer: Any = None) -> IDFTable:
    """Count `source`'s documents with `tokenizer_name`'s tokenizer (ids without special tokens) and write the table
    to `out` atomically; the progress bar counts documents (up to the cap when one is set)."""
    if tokenizer is None:
        tokenizer = load_tokenizer(tokenizer_name)
    advance = (progress or (lambda description, total: lambda n: None))(
        f"IDF table: counting documents of {source.identity()['corpus']}", source.expected())

    def tokenize(texts: list[str]) -> list[list[int]]:
        ids = tokenizer(texts, add_special_tokens=False).input_ids
        advance(len(texts))
        return list(ids)

    df, n = document_frequencies(tokenize, source.documents(), len(tokenizer))
    if n == 0:
        raise HaldetError(f"the IDF corpus {source.identity()['corpus']} gave no document", where="IDF corpus",
                          hint="check the files (empty lines are skipped) or the hub split and text field")
    meta = {"format": TABLE_FORMAT, "version": IDF_VERSION, **source.identity(), "tokenizer": tokenizer_name,
            "vocab": len(df), "documents": n}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.npz")
    np.savez(tmp, df=df, meta=json.dumps(meta))
    tmp.replace(out)
    return IDFTable(df, n, meta)


def read_table(path: str | Path, where: str = "detector_params.focus.idf_table") -> IDFTable:
    """A table file written by `build_table`; a missing or malformed one is one error naming it."""
    path = Path(path).expanduser()
    hint = "build one with `haldet detectors idf CORPUS --tokenizer MODEL --out FILE`"
    if not path.is_file():
        raise HaldetError(f"IDF table file not found: {path}", where=where, hint=hint)
    try:
        with np.load(path, allow_pickle=False) as data:
            df, meta = np.asarray(data["df"]), json.loads(str(data["meta"]))
    except (OSError, ValueError, KeyError) as exc:
        raise HaldetError(f"{path} is not an IDF table ({type(exc).__name__}: {exc})", where=where,
                          hint=hint) from None
    if meta.get("format") != TABLE_FORMAT or df.ndim != 1 or int(meta.get("documents", 0)) < 1:
        raise HaldetError(f"{path} is not an IDF table of format {TABLE_FORMAT}", where=where, hint=hint)
    return IDFTable(df, int(meta["documents"]), {**meta, "file": str(path)})


def table_identity(path: str | Path) -> dict[str, Any]:
    """A table file's record (corpus, tokenizer, documents) and content hash, for a detector's identity; an
    unreadable file says so (scoring then stops with the error)."""
    try:
        table = read_table(path)
    except HaldetError as exc:
        return {"kind": "idf", "table": str(path), "error": exc.message}
    meta = {k: v for k, v in table.meta.items() if k != "file"}
    return {"kind": "idf", **meta, "sha256": file_sha256(Path(path).expanduser())}


# --- Focus's three ways to an IDF table ------------------------------------------------------------------------------
def _built_source(corpus: Any, documents: int | None) -> CorpusSource | None:
    """A corpus Focus builds with this module (`hf:ID`, or a list of files); None for the older single-corpus path
    (`halueval`, one local file: `haldet.models.idf`)."""
    if isinstance(corpus, str) and not corpus.startswith(HUB_PREFIX):
        return None
    return CorpusSource.parse(corpus, limit=documents, where="detector_params.focus.idf_corpus")


def focus_idf_identity(corpus: Any, table: str | None, documents: int | None) -> dict[str, Any]:
    """What Focus's IDF comes from, for its identity: the table file's record, a built corpus's source, or the
    older corpus fingerprint (unchanged, so scores keyed before these options stay valid)."""
    if table is not None:
        return table_identity(table)
    try:
        source = _built_source(corpus, documents)
    except HaldetError as exc:
        return {"kind": "idf", "corpus": str(corpus), "error": exc.message}
    if source is None:
        return corpus_identity(str(corpus))
    return {"kind": "idf", "version": IDF_VERSION, **source.identity()}


def focus_table(corpus: Any, table: str | None, documents: int | None, tokenizer_name: str,
                progress: Progress | None = None) -> IDFTable:
    """Focus's IDF table: the given table file (checked to be of `tokenizer_name`), a corpus built into the user
    cache on first use (keyed by its source and the tokenizer), or the older per-corpus table."""
    if table is not None:
        found = read_table(table)
        if found.meta.get("tokenizer") != tokenizer_name:
            raise HaldetError(f"the IDF table {table} counts the ids of tokenizer {found.meta.get('tokenizer')!r}, "
                              f"not of {tokenizer_name!r} whose tokens Focus scores",
                              where="detector_params.focus.idf_table",
                              hint="build a table with --tokenizer set to the scored model, or set "
                                   "detector_params.focus.tokenizer to the table's tokenizer if they are the same")
        return found
    source = _built_source(corpus, documents)
    if source is None:
        return idf_table(tokenizer_name, str(corpus))
    path = cache_dir() / "idf" / f"{model_slug(tokenizer_name)}-{digest([source.identity(), IDF_VERSION])[:16]}.npz"
    if path.is_file():
        return read_table(path)
    return build_table(source, tokenizer_name, path, progress)
