"""Focus's IDF table from any corpus (`haldet.models.idf_corpus`, `haldet detectors idf`): on a three-document corpus
and a word-level tokenizer built here, the document frequencies and IDF equal the hand-computed ones; the table's
record (corpus files' hashes, tokenizer, documents) is Focus's identity and changes with the corpus; a missing or
malformed corpus or table is one clear error; the same table through the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from haldet.errors import HaldetError
from haldet.models.idf_corpus import (
    PAPER_CORPUS,
    CorpusSource,
    build_table,
    focus_idf_identity,
    focus_table,
    read_table,
)

VOCAB = {"[UNK]": 0, "apple": 1, "banana": 2, "cherry": 3, "date": 4, "elder": 5}
DOCS = ["apple banana apple", "banana cherry", "cherry cherry date"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real word-level fast tokenizer with a known vocabulary, saved as a folder `load_tokenizer` reads."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(WordLevel(VOCAB, unk_token="[UNK]"))
    core.pre_tokenizer = Whitespace()
    folder = tmp_path_factory.mktemp("word-tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[UNK]").save_pretrained(folder)
    (folder / "config.json").write_text('{"model_type": "gpt2"}', encoding="utf-8")  # a model folder, as loaded
    return str(folder)


def _corpus(tmp: Path) -> tuple[Path, Path]:
    txt = tmp / "docs.txt"
    txt.write_text(f"{DOCS[0]}\n\n{DOCS[1]}\n", encoding="utf-8")  # the empty line is no document
    jsonl = tmp / "more.jsonl"
    jsonl.write_text(json.dumps({"id": 3, "text": DOCS[2]}) + "\n", encoding="utf-8")
    return txt, jsonl


def test_built_table_matches_the_hand_computed_idf(tmp_path: Path, tokenizer: str) -> None:
    txt, jsonl = _corpus(tmp_path)
    source = CorpusSource.parse([str(txt), str(jsonl)])
    bars: list[tuple[str, int]] = []
    counted: list[int] = []
    table = build_table(source, tokenizer, tmp_path / "t.npz",
                        lambda what, total: bars.append((what, total)) or counted.append)
    assert bars == [("IDF table: counting documents of files", 3)] and sum(counted) == 3  # the progress bar
    # df by hand: apple 1 (twice in one document), banana 2, cherry 2, date 1, elder 0, [UNK] 0; N = 3
    assert table.documents == 3 and table.df.tolist() == [0, 1, 2, 2, 1, 0]
    expected = [math.log(3 / (df + 1)) for df in (0, 1, 2, 2, 1, 0)]  # Focus: ln(N / (df + 1))
    assert table.idf("focus") == pytest.approx(expected)
    again = read_table(tmp_path / "t.npz")
    assert np.array_equal(again.df, table.df) and again.documents == 3
    assert again.meta["tokenizer"] == tokenizer and [f["name"] for f in again.meta["files"]] == ["docs.txt",
                                                                                                 "more.jsonl"]
    capped = build_table(CorpusSource.parse([str(txt), str(jsonl)], limit=2), tokenizer, tmp_path / "c.npz")
    assert capped.documents == 2 and capped.df.tolist() == [0, 1, 2, 1, 0, 0]


def test_table_record_is_focus_identity_and_follows_the_corpus(tmp_path: Path, tokenizer: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from haldet.detectors.focus import Focus

    txt, jsonl = _corpus(tmp_path)
    build_table(CorpusSource.parse([str(txt), str(jsonl)]), tokenizer, tmp_path / "t.npz")
    det = Focus(idf_table=str(tmp_path / "t.npz"), tokenizer=tokenizer)
    idf = det.identity()["models"]["idf"]
    assert (idf["documents"], idf["tokenizer"], idf["corpus"]) == (3, tokenizer, "files") and idf["sha256"]
    txt.write_text("apple\n", encoding="utf-8")  # another corpus, same file name: another table, another identity
    build_table(CorpusSource.parse([str(txt), str(jsonl)]), tokenizer, tmp_path / "t.npz")
    assert Focus(idf_table=str(tmp_path / "t.npz")).identity()["models"]["idf"] != idf
    # the default corpus keeps its older identity; a hub corpus is named by id, split, field and cap (no network)
    assert focus_idf_identity("halueval", None, None)["corpus"] == "halueval"
    hub = focus_idf_identity(PAPER_CORPUS, None, 1_000_000)
    assert hub["corpus"] == PAPER_CORPUS and hub["limit"] == 1_000_000 and hub["split"] == "train"
    # a table of another tokenizer is refused; a corpus of files is built once into the cache
    with pytest.raises(HaldetError, match="counts the ids of tokenizer"):
        focus_table("halueval", str(tmp_path / "t.npz"), None, "smollm2-135m")
    monkeypatch.setenv("HALDET_CACHE", str(tmp_path / "cache"))
    built = focus_table([str(txt)], None, None, tokenizer)
    assert built.documents == 1 and len(list((tmp_path / "cache" / "idf").glob("*.npz"))) == 1
    with pytest.raises(ValueError, match="not both"):
        Focus(idf_table=str(tmp_path / "t.npz"), idf_corpus=PAPER_CORPUS)


@pytest.mark.parametrize(("content", "suffix", "message"), [
    ("not json\n", ".jsonl", "malformed JSON"),
    ('{"body": "apple"}\n', ".jsonl", "no text field 'text'"),
    ("\n\n", ".txt", "gave no document"),
])
def test_malformed_corpus_is_one_clear_error(tmp_path: Path, tokenizer: str, content: str, suffix: str,
                                             message: str) -> None:
    bad = tmp_path / f"bad{suffix}"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(HaldetError, match=message) as exc:
        build_table(CorpusSource.parse([str(bad)]), tokenizer, tmp_path / "t.npz")
    assert not (tmp_path / "t.npz").exists()
    if suffix == ".jsonl":
        assert exc.value.where == f"{bad}:1"


def test_missing_corpus_or_table_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HaldetError, match="IDF corpus file not found"):
        CorpusSource.parse([str(tmp_path / "none.txt")])
    with pytest.raises(HaldetError, match="one dataset id alone"):
        CorpusSource.parse([PAPER_CORPUS, str(tmp_path / "x.txt")])
    with pytest.raises(HaldetError, match="IDF table file not found"):
        read_table(tmp_path / "none.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a table")
    with pytest.raises(HaldetError, match="is not an IDF table"):
        read_table(tmp_path / "junk.npz")
    assert "error" in focus_idf_identity("halueval", str(tmp_path / "none.npz"), None)


def test_detectors_idf_command_writes_the_table(tmp_path: Path, tokenizer: str) -> None:
    from typer.testing import CliRunner

    from haldet.cli import app

    txt, jsonl = _corpus(tmp_path)
    out = tmp_path / "table.npz"
    args = ["detectors", "idf", str(txt), str(jsonl), "--tokenizer", tokenizer, "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "3 documents of files" in " ".join(result.output.split())
    assert read_table(out).df.tolist() == [0, 1, 2, 2, 1, 0]
    refused = CliRunner().invoke(app, args)
    # an existing table is never overwritten unasked (`haldet.cli.entry` makes the error exit status 2)
    assert isinstance(refused.exception, HaldetError) and "exists" in str(refused.exception)
    assert CliRunner().invoke(app, [*args, "--overwrite"]).exit_code == 0
