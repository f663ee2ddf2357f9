"""Original release formats (issue 19): fixtures written in each release's own layout and field names
(tests/fixtures/originals/<name>/, file names as released) load to the same instances as their hub-schema twins
(tests/fixtures/hub_twins/<name>/); formats are detected from content; any file name under DIR/<name>/ and
--data-file work; unrecognised files, missing columns and bad rows each get their own message with file lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.schema import Instance
from repo_paths import FIXTURES

FIX = FIXTURES
ORIGINALS, TWINS = FIX / "originals", FIX / "hub_twins"
RELEASES = sorted(p.name for p in ORIGINALS.iterdir())


def load(name: str, data_dir: Path, **params: Any) -> list[Instance]:
    instances, _ = get_adapter(name, data_dir, params).load(seed=0)
    return instances


def comparable(instances: list[Instance]) -> list[dict[str, Any]]:
    """Instances without `source` (the original row as read, which differs between the layouts by design)."""
    return sorted((i.model_dump(mode="json", exclude={"source"}) for i in instances), key=lambda d: d["id"])


def test_every_release_fixture_has_a_hub_twin() -> None:
    assert set(RELEASES) == {p.name for p in TWINS.iterdir()}
    assert {"truthfulqa", "squad_v2", "svamp", "theoremqa", "mbpp", "coqa", "hotpotqa", "xsum", "triviaqa",
            "arc_challenge", "commonsenseqa", "halueval_qa", "xlam", "belebele"} <= set(RELEASES)


@pytest.mark.parametrize("name", RELEASES)
def test_release_format_loads_to_the_same_instances_as_the_hub_twin(name: str) -> None:
    original, twin = load(name, ORIGINALS), load(name, TWINS)
    assert original and comparable(original) == comparable(twin)


def test_belebele_release_folder_reads_only_the_selected_languages() -> None:
    adapter = get_adapter("belebele", ORIGINALS)
    assert not any(p.name == "zul_Latn.jsonl" for p in adapter.local_paths())  # not selected: never read
    with_zulu = load("belebele", ORIGINALS, languages=["zul_Latn"])
    assert with_zulu and all(i.meta["language"] == "zul_Latn" for i in with_zulu)


def test_truthfulqa_csv_lists_are_split_on_semicolons() -> None:
    items = {i.question: i for i in load("truthfulqa", ORIGINALS)}
    turkey = items["Why is Turkey in the EU?"]
    assert turkey.id.startswith("truthfulqa/validation/")
    assert turkey.references == ["Turkey is not in the EU", "It's not true that Turkey is part of the European Union"]
    assert turkey.incorrect == ["Turkey is in the EU", "Turkey is in the EU because it joined the EU"]


def test_squad_release_is_flattened_with_impossible_questions_unanswerable(tmp_path: Path) -> None:
    items = {i.id: i for i in load("squad_v2", ORIGINALS)}
    assert len(items) == 3
    assert items["squad_v2/validation/5ad39d53604f3c001a3fe8d1"].meta["unanswerable"]
    assert items["squad_v2/validation/56ddde6b9a695914005b9628"].references == ["France"]
    bad = json.loads((ORIGINALS / "squad_v2" / "dev-v2.0.json").read_text())
    bad["data"][1]["paragraphs"][0]["qas"][0]["question"] = ""
    (tmp_path / "squad_v2").mkdir()
    (tmp_path / "squad_v2" / "dev-v2.0.json").write_text(json.dumps(bad, indent=2))
    with pytest.raises(HaldetError, match="line 49 of dataset 'squad_v2'"):  # the question's own line (its id)
        load("squad_v2", tmp_path)


def test_mbpp_release_applies_the_task_id_split_and_never_evaluates_prompt_tasks() -> None:
    test_ids = sorted(i.id for i in load("mbpp", ORIGINALS))
    assert test_ids == ["mbpp/test/11", "mbpp/test/12"]
    assert [i.id for i in load("mbpp", ORIGINALS, split="validation")] == ["mbpp/validation/520"]
    assert [i.id for i in load("mbpp", ORIGINALS, split="train")] == ["mbpp/train/700"]
    assert not any(i.id.endswith("/2") for i in load("mbpp", ORIGINALS))


def test_sanitized_mbpp_is_accepted(tmp_path: Path) -> None:
    row = {"source_file": "x.py", "task_id": 11, "prompt": "Write a function to multiply two numbers.",
           "code": "def mul(a, b):\n    return a * b", "test_imports": [], "test_list": ["assert mul(2, 3) == 6"]}
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "sanitized-mbpp.json").write_text(json.dumps([row], indent=1))
    (item,) = load("mbpp", tmp_path)
    assert item.id == "mbpp/test/11" and item.question == row["prompt"]


def test_xsum_release_folder_uses_its_split_file() -> None:
    assert [i.id for i in load("xsum", ORIGINALS)] == ["xsum/test/36001234"]
    assert [i.id for i in load("xsum", ORIGINALS, split="train")] == ["xsum/train/36005678"]


def test_data_file_and_any_file_name(tmp_path: Path) -> None:
    release = ORIGINALS / "squad_v2" / "dev-v2.0.json"
    assert comparable(load("squad_v2", release)) == comparable(load("squad_v2", TWINS))  # --data-file PATH
    (tmp_path / "gsm8k").mkdir()
    shutil.copy(FIX / "datasets" / "gsm8k" / "test.jsonl", tmp_path / "gsm8k" / "my download (1).jsonl")
    assert len(load("gsm8k", tmp_path)) == 3
    # RAGTruth with --data-file: the other release file is found next to it
    assert load("ragtruth", FIX / "datasets" / "ragtruth" / "response.jsonl")


def test_a_readme_next_to_the_data_is_ignored_but_a_broken_data_file_is_not(tmp_path: Path) -> None:
    (tmp_path / "gsm8k").mkdir()
    shutil.copy(FIX / "datasets" / "gsm8k" / "test.jsonl", tmp_path / "gsm8k" / "test.jsonl")
    (tmp_path / "gsm8k" / "README.md").write_text("# GSM8K\nGrade school math.\n")
    assert len(load("gsm8k", tmp_path)) == 3
    (tmp_path / "gsm8k" / "train.jsonl").write_text('{"question": "1+1?",\n')
    with pytest.raises(HaldetError, match="malformed JSON"):
        load("gsm8k", tmp_path)


def test_unrecognised_file_is_named_with_the_accepted_formats(tmp_path: Path) -> None:
    (tmp_path / "squad_v2").mkdir()
    (tmp_path / "squad_v2" / "notes.json").write_text('[{"foo": 1, "bar": 2}]')
    with pytest.raises(HaldetError) as err:
        load("squad_v2", tmp_path)
    text = err.value.message + " " + err.value.hint
    assert "notes.json" in text and "not a known format (columns found: foo, bar)" in text
    assert "SQuAD v2.0 release" in text and "hub schema" in text


def test_missing_column_is_not_a_bad_row(tmp_path: Path) -> None:
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "1+1?", "solution": "2"}\n')
    with pytest.raises(HaldetError) as err:
        load("gsm8k", tmp_path)
    assert "missing column(s) answer (columns found: question, solution)" in err.value.message
    assert "line 1" not in err.value.message and "--on-bad-row" not in err.value.hint


def test_nested_file_read_as_flat_rows_says_so(tmp_path: Path) -> None:
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hotpotqa" / "dev.json").write_text(json.dumps([{"title": "t", "paragraphs": [{"context": "c"}]}]))
    with pytest.raises(HaldetError) as err:
        load("hotpotqa", tmp_path)
    assert "nested file (field 'paragraphs' holds a list of records)" in err.value.message


def test_row_numbers_are_file_lines_in_every_format(tmp_path: Path) -> None:
    (tmp_path / "gsm8k").mkdir()
    pretty = [{"question": "1+1?", "answer": "2\n#### 2"}, {"question": "2+2?", "answer": "no marker"}]
    (tmp_path / "gsm8k" / "test.json").write_text(json.dumps(pretty, indent=2))  # 2nd object starts on line 6
    with pytest.raises(HaldetError, match="line 6 of dataset 'gsm8k'"):
        load("gsm8k", tmp_path)
    (tmp_path / "gsm8k" / "test.json").unlink()
    (tmp_path / "gsm8k" / "test.csv").write_text('question,answer\n"1+1?","two\nlines\n#### 2"\n"2+2?",bad\n')
    with pytest.raises(HaldetError, match="line 5 of dataset 'gsm8k'"):  # the CSV record after a 3-line one
        load("gsm8k", tmp_path)


def test_every_row_skipped_shows_the_reasons(tmp_path: Path) -> None:
    (tmp_path / "gsm8k").mkdir()
    rows = '{"question": "a", "answer": "x"}\n{"question": "b", "answer": "y"}\n'
    (tmp_path / "gsm8k" / "test.jsonl").write_text(rows)
    with pytest.raises(HaldetError) as err:
        get_adapter("gsm8k", tmp_path).load(on_bad_row="skip")
    assert "every row" in err.value.message and "line 1" in err.value.hint and "line 2" in err.value.hint


def test_empty_file_has_a_hint(tmp_path: Path) -> None:
    (tmp_path / "xsum").mkdir()
    (tmp_path / "xsum" / "test.jsonl").write_text("\n")
    with pytest.raises(HaldetError) as err:
        load("xsum", tmp_path)
    assert "empty" in err.value.message and "fetch the file again" in err.value.hint


def test_cli_data_file_split_and_formats() -> None:
    from typer.testing import CliRunner

    from haldet.cli import app

    runner = CliRunner()
    mbpp = str(ORIGINALS / "mbpp" / "mbpp.jsonl")
    shown = runner.invoke(app, ["datasets", "show", "mbpp", "--data-file", mbpp, "--split", "validation", "--json"])
    assert shown.exit_code == 0, shown.output
    assert [d["id"] for d in json.loads(shown.stdout)] == ["mbpp/validation/520"]
    listed = runner.invoke(app, ["datasets", "show", "truthfulqa", "--formats"])
    assert "TruthfulQA.csv release" in listed.stdout and "hub schema" in listed.stdout
    both = runner.invoke(app, ["run", "--dataset", "gsm8k,svamp", "--data-file", mbpp])  # the entry point prints it
    assert isinstance(both.exception, HaldetError) and "one --dataset" in both.exception.hint


def test_data_file_with_several_datasets_from_a_config_file_is_refused(tmp_path: Path) -> None:
    """A suite's own datasets take the file as the first one (tests/detectors/test_redeep.py runs it); datasets
    listed by a
    config file are not guessed between."""
    from typer.testing import CliRunner

    from haldet.cli import app

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("datasets: [gsm8k, svamp]\n")
    result = CliRunner().invoke(app, ["run", "--config", str(cfg), "--data-file", str(ORIGINALS / "mbpp" /
                                                                                      "mbpp.jsonl")])
    err = result.exception
    assert isinstance(err, HaldetError) and "the run has 2 datasets (gsm8k, svamp)" in err.message
    assert err.where == "--data-file" and "one --dataset" in (err.hint or "")


def test_id_columns_are_optional(tmp_path: Path) -> None:
    (tmp_path / "xsum").mkdir()
    (tmp_path / "xsum" / "test.jsonl").write_text('{"document": "A long article.", "summary": "Short."}\n')
    (item,) = load("xsum", tmp_path)
    assert item.id == "xsum/test/0"
