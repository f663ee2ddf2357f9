"""Your own responses through the embedded model: the API and the CLI write the same run directory, and an edited
responses file rerun into it is noticed (what changed, by id), refused without an update, kept in the history with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import haldet
from haldet.cli import app
from haldet.errors import HaldetError

pytestmark = pytest.mark.slow

ROWS = [
    {"question": "Capital of France?", "answer": "Paris.", "label": 0, "id": "q0"},
    {"question": "2 + 2?", "answer": "5", "label": 1, "id": "q1"},
    {"question": "Colour of the sky?", "answer": "Green.", "label": 1, "id": "q2"},
    {"question": "Largest ocean?", "answer": "The Pacific.", "label": 0, "id": "q3"},
]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("responses")
    data = write(tmp / "r.jsonl", ROWS)
    haldet.score_responses(data, detectors=["perplexity"], out=tmp / "api", progress=False)
    result = CliRunner().invoke(app, ["run", "--responses", str(data), "--detector", "perplexity",
                                      "--out", str(tmp / "cli"), "--allow-failures"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return data, tmp / "api", tmp / "cli"


def test_the_api_and_the_cli_write_the_same_files(runs: tuple[Path, Path, Path]) -> None:
    _, api, cli = runs
    assert {"tables.md", "tables.tex", "report.html", "suite_tables.md", "results.json"} <= files(api)
    assert files(api) == files(cli)
    assert (api / "suite_tables.md").read_text() == (cli / "suite_tables.md").read_text()


def test_an_edited_file_is_refused_with_what_changed_and_kept_in_the_history_with_update(
        runs: tuple[Path, Path, Path]) -> None:
    data, _, cli = runs
    before = json.loads((cli / "results.json").read_text())
    edited = [dict(ROWS[0], label=1), dict(ROWS[1], answer="4"), ROWS[2],
              {"question": "Tallest mountain?", "answer": "Everest.", "label": 0, "id": "q9"}]
    write(data, edited)  # q0's label and q1's answer edited, q3 removed, q9 added
    args = ["run", "--responses", str(data), "--detector", "perplexity", "--out", str(cli), "--allow-failures"]
    refused = CliRunner().invoke(app, args)
    assert isinstance(refused.exception, HaldetError), refused.output
    what = refused.exception.what
    assert f"the responses given by --responses {data} differ" in what
    for line in ("1 item added (q9)", "1 item removed (q3)", "1 answer differs (q1)", "1 label differs (q0)"):
        assert line in what
    assert "--update" in refused.exception.hint
    assert json.loads((cli / "results.json").read_text()) == before  # nothing replaced
    updated = CliRunner().invoke(app, [*args, "--update"])
    assert updated.exception is None or isinstance(updated.exception, SystemExit), updated.output
    (entry,) = [h for h in json.loads((cli / "manifest.json").read_text())["history"] if "data_changed" in h]
    assert "1 item added (q9)" in entry["data_changed"] and entry["results"] == before
    table = haldet.load_run(cli).table()
    assert sorted(table["source_id"]) == ["q0", "q1", "q2", "q9"]
    # the same data again: nothing to say, nothing refused
    again = CliRunner().invoke(app, args)
    assert again.exception is None or isinstance(again.exception, SystemExit), again.output


def test_another_file_into_the_directory_names_the_option_given(runs: tuple[Path, Path, Path],
                                                                tmp_path: Path) -> None:
    _, api, _ = runs
    other = write(tmp_path / "other.jsonl", ROWS[:3])
    with pytest.raises(HaldetError) as refused:
        haldet.score_responses(other, detectors=["perplexity"], out=api, progress=False)
    assert "not the data given by score_responses(data=...)" in refused.value.what
    assert "update=True" in refused.value.hint
    with pytest.raises(HaldetError) as edited:  # rows in memory into a directory of a file's run
        haldet.score_responses(ROWS[:2], detectors=["perplexity"], out=api, progress=False)
    assert "score_responses(data=...)" in edited.value.what
    data, _, _ = runs
    write(data, ROWS)  # the data the api run scored (another test edits the file)
    with pytest.raises(HaldetError) as changed:  # another config: refused as `haldet run` refuses it, API-worded
        haldet.score_responses(data, detectors=["perplexity", "entropy"], out=api, progress=False)
    assert "changed: detectors" in changed.value.what and "update=True" in changed.value.hint


def test_an_answer_past_the_context_is_named_counted_and_never_tokenised_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1 MB answer on smollm2-135m (context 8192 tokens): the reason says it exceeds the context with its token
    count against the limit, the footer counts it, and no call tokenises more than a bounded chunk of it."""
    from haldet.backends.hf import tokens

    lengths: list[int] = []
    encode = tokens.encode_response

    def recording(backend, text):  # type: ignore[no-untyped-def]
        lengths.append(len(text))
        return encode(backend, text)

    monkeypatch.setattr(tokens, "encode_response", recording)
    long = "The river bends north past the old mill. " * 25_000  # 1,025,000 characters
    data = write(tmp_path / "long.jsonl", [ROWS[0], {"question": "Tell me everything.", "answer": long, "id": "big"}])
    result = CliRunner().invoke(app, ["run", "--responses", str(data), "--detector", "perplexity",
                                      "--out", str(tmp_path / "run"), "--allow-failures"])
    output = " ".join(result.output.split())
    assert "2 responses scored, 1 without a score" in output
    assert "1 of them exceed the model's context (not read)" in output
    scores = haldet.load_run(tmp_path / "run").scores.set_index("id")
    reason = scores.loc["responses/data/big", "reason"]
    assert reason.startswith("the answer exceeds the model's context: at least ")
    assert "of 1,025,000 characters) against a limit of 8,192 tokens" in reason
    assert scores.loc["responses/data/q0", "reason"] in ("", None)
    assert max(lengths) <= 8192 * 8  # a bounded chunk (8 characters per token of the context), never the megabyte
