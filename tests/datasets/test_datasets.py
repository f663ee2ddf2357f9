"""Dataset adapters: every registry entry, the mapping of each source schema (fixtures written in the source's
own field names under tests/fixtures/datasets/), answer extraction, packaged data read for real, the loading
machinery (split fallback, seeded shuffle, limit, hub calls) and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import DATASETS, get_adapter, register
from haldet.datasets.formats import read_table
from haldet.datasets.rows import BadRow, number_string
from haldet.errors import HaldetError
from haldet.schema import Instance
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"
NAMES = ["arc_challenge", "commonsenseqa", "triviaqa", "truthfulqa", "squad_v2", "hotpotqa", "coqa", "halueval_qa",
         "halueval_dialogue", "halueval_summarization", "ragtruth", "xsum", "gsm8k", "svamp", "theoremqa",
         "humaneval", "mbpp", "xlam", "belebele"]
TASK_TYPES = {"mcq", "short_answer", "span", "multi_hop", "dialogue", "grounded_qa", "rag", "summarization",
              "reasoning", "science", "code", "tool_call", "long_form"}


def load(name: str, limit: int | None = None, data_dir: Path | None = FIX, **params: Any) -> list[Instance]:
    instances, _ = get_adapter(name, data_dir, params).load(limit=limit)
    return instances


def by_id(instances: list[Instance]) -> dict[str, Instance]:
    return {i.id: i for i in instances}


# --- registry -------------------------------------------------------------------------------------------
def test_registry_holds_every_openhaldet_dataset_with_its_declarations() -> None:
    assert set(NAMES) <= set(DATASETS.names())  # suite datasets (VeriGray, ...) are tested by their suites
    for name, cls in DATASETS:
        assert cls.name == name
        assert cls.scenario and cls.source and cls.license, name
        assert cls.task_type in TASK_TYPES, name
        # without a hub id an adapter says itself where its data comes from (RAGTruth downloads its release files,
        # TRIVIA+ may not be redistributed); HalluLens detection sets are written by `haldet hallulens evaluate`
        assert cls.hub_id or cls.hub_rows is not DatasetAdapter.hub_rows or name.startswith("hallulens_"), name


@pytest.mark.parametrize("name", [n for n in NAMES if not n.startswith("halueval") and n != "humaneval"])
def test_every_fixture_maps_into_valid_instances(name: str) -> None:
    adapter = get_adapter(name, FIX)
    assert adapter.offline_available()
    instances, report = adapter.load()
    assert instances and report.n_skipped == 0
    for inst in instances:
        assert inst.id.startswith(f"{name}/") and inst.dataset == name
        assert inst.task_type == adapter.task_type and inst.scenario == adapter.scenario
        assert inst.source, "the original row is kept"
        json.dumps(inst.source)  # JSON-safe
        assert inst.references or inst.meta.get("unanswerable")


# --- MCQ ------------------------------------------------------------------------------------------------
def test_arc_numeric_labels_become_letters_and_answer_key_maps() -> None:
    items = by_id(load("arc_challenge"))
    water = items["arc_challenge/test/NYSEDREGENTS_2015_8_12"]
    assert water.options == {"A": "the Moon", "B": "wind", "C": "the Sun", "D": "volcanoes"}
    assert water.references == ["C"] and water.incorrect == ["A", "B", "D"]
    assert water.meta["answer_text"] == "the Sun"
    plants = items["arc_challenge/test/Mercury_7001"]
    assert plants.references == ["B"] and plants.meta["answer_text"] == "carbon dioxide"
    assert list(items["arc_challenge/test/Mercury_7002"].options) == ["A", "B", "C"]


def test_arc_reads_csv_with_nested_json_cells() -> None:
    (item,) = load("arc_challenge", data_dir=FIX / "csv")
    assert item.id == "arc_challenge/test/csv1" and item.references == ["B"] and item.options["B"] == "whale"


def test_commonsenseqa_uses_validation_split_and_five_options() -> None:
    items = by_id(load("commonsenseqa"))
    item = items["commonsenseqa/validation/csqa-003"]
    assert len(item.options) == 5 and item.references == ["C"] and item.meta["answer_text"] == "scissors"
    assert item.meta["concept"] == "cut"


def test_belebele_several_languages_by_default_and_configurable() -> None:
    adapter = get_adapter("belebele")
    assert len(adapter.languages()) >= 5 and "eng_Latn" in adapter.languages()
    items = load("belebele")
    assert {i.meta["language"] for i in items} == {"eng_Latn", "fra_Latn", "deu_Latn"}
    fra = next(i for i in items if i.meta["language"] == "fra_Latn")
    assert fra.references == ["B"] and fra.meta["answer_text"] == "Dans les collines du nord"
    assert fra.context.startswith("La rivière") and fra.task_type == "mcq" and fra.scenario == "multilingual"
    only = load("belebele", languages=["deu_Latn"])
    assert [i.meta["language"] for i in only] == ["deu_Latn"] and only[0].references == ["A"]


def test_belebele_single_file_is_filtered_by_dialect(tmp_path: Path) -> None:
    rows = read_table(FIX / "belebele" / "eng_Latn.jsonl") + read_table(FIX / "belebele" / "fra_Latn.jsonl")
    (tmp_path / "belebele").mkdir()
    (tmp_path / "belebele" / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    items = load("belebele", data_dir=tmp_path, languages="fra_Latn")
    assert [i.meta["language"] for i in items] == ["fra_Latn"]
    with pytest.raises(HaldetError, match="no rows for languages jpn_Jpan"):
        load("belebele", data_dir=tmp_path, languages=["jpn_Jpan"])


# --- open / reading QA ----------------------------------------------------------------------------------
def test_triviaqa_references_are_value_plus_deduplicated_aliases() -> None:
    items = by_id(load("triviaqa"))
    assert items["triviaqa/validation/tc_1"].references == ["Mars", "Planet Mars"]
    assert items["triviaqa/validation/tc_2"].references == ["Rome", "Roma"]


def test_truthfulqa_incorrect_answers_go_to_r_minus() -> None:
    gum = load("truthfulqa")[0] if "gum" in load("truthfulqa")[0].question else load("truthfulqa")[1]
    assert gum.references[0] == "It passes through your digestive system"
    assert gum.references == ["It passes through your digestive system", "Nothing much happens"]
    assert gum.incorrect == ["It stays in your stomach for seven years", "You will die"]


def test_squad_v2_unanswerable_is_explicit() -> None:
    items = by_id(load("squad_v2"))
    answerable, unanswerable = items["squad_v2/validation/sq1"], items["squad_v2/validation/sq2"]
    assert answerable.references == ["the Mediterranean Sea", "Mediterranean Sea"]
    assert answerable.meta["unanswerable"] is False and answerable.task_type == "span"
    assert unanswerable.meta["unanswerable"] is True and unanswerable.references == []
    assert "does not contain" in unanswerable.meta["abstain_reference"]
    assert "context does not contain the answer" in unanswerable.instruction


def test_hotpotqa_supporting_paragraphs_as_titled_context() -> None:
    (item,) = load("hotpotqa")
    assert item.context == ("Film Alpha: Film Alpha is a 2001 drama. It was directed by Ida Berg.\n\n"
                            "Ida Berg: Ida Berg is a film maker. She was born in Norway.")
    assert item.references == ["Norway"] and item.meta["supporting_facts"]["title"] == ["Film Alpha", "Ida Berg"]
    (full,) = load("hotpotqa", paragraphs="all")
    assert "Unrelated Lake: Unrelated Lake is a lake in Canada." in full.context


def test_coqa_every_turn_is_an_item_with_earlier_turns_in_context() -> None:
    items = by_id(load("coqa"))
    assert len(items) == 5  # one story, five turns
    first, third = items["coqa/validation/0_1"], items["coqa/validation/0_3"]
    assert first.question == "What did Tom have?" and first.references == ["a kite"]
    assert "Conversation so far" not in first.context
    assert third.question == "Who went with him?" and third.references == ["his sister Ann"]
    assert "Q: What did Tom have?\nA: a kite\nQ: What colour was it?\nA: red" in third.context
    assert "Who went with him?" not in third.context
    assert third.meta["turn"] == 3 and third.context.startswith("Tom had a red kite.")
    last = items["coqa/validation/0_5"]
    assert last.meta["unanswerable"] is True and last.references == []


# --- RAG / summarization ----------------------------------------------------------------------------------
def test_ragtruth_joins_release_files_and_keeps_human_labels() -> None:
    items = by_id(load("ragtruth"))
    assert set(items) == {"ragtruth/test/101", "ragtruth/test/102", "ragtruth/test/103"}
    qa = items["ragtruth/test/101"]
    assert qa.question == "how long do tomato seeds take to sprout" and qa.context.startswith("passage 1:")
    assert qa.references == ["Tomato seeds sprout in about 5 to 10 days."]
    assert qa.incorrect == ["Tomato seeds sprout in 2 days in cold soil."]
    labelled = {r["id"]: r for r in qa.meta["responses"]}
    assert labelled["r2"]["hallucinated"] and labelled["r2"]["labels"][0]["text"] == "2 days"
    assert not labelled["r1"]["hallucinated"] and qa.meta["rag_task"] == "QA"
    data2txt = items["ragtruth/test/103"]
    assert [r["id"] for r in data2txt.meta["responses"]] == ["r4"]  # r5 is in the train split
    assert json.loads(data2txt.context)["name"] == "Blue Cafe"
    (train,) = load("ragtruth", split="train")
    assert train.id == "ragtruth/train/103" and train.incorrect == ["Blue Cafe is a steakhouse."]


def test_ragtruth_missing_release_file_names_it_and_its_fields(tmp_path: Path) -> None:
    (tmp_path / "ragtruth").mkdir()
    shutil.copy(FIX / "ragtruth" / "response.jsonl", tmp_path / "ragtruth")
    with pytest.raises(HaldetError) as err:
        load("ragtruth", data_dir=tmp_path)
    assert "source_info.jsonl" in err.value.message and "source_id, task_type, source_info" in err.value.message


def test_xsum_document_and_reference_summary() -> None:
    item = by_id(load("xsum"))["xsum/test/3001"]
    assert item.context.startswith("The museum reopened") and item.task_type == "summarization"
    assert item.references == ["A museum has reopened after two years of building work."]


# --- math / science -------------------------------------------------------------------------------------
def test_number_string_plain_forms() -> None:
    assert [number_string(v) for v in ("1,250", 8.0, " $3.50 ", "-4", "2.5", "50%")] == \
        ["1250", "8", "3.5", "-4", "2.5", "50"]
    with pytest.raises(ValueError):
        number_string("ten")


def test_gsm8k_final_number_extracted_and_solution_cleaned() -> None:
    items = load("gsm8k")
    refs = {i.question.split()[0] + i.question.split()[1]: i.references for i in items}
    assert refs == {"Annhas": ["10"], "Ashop": ["2500"], "Arope": ["3.5"]}
    ann = next(i for i in items if i.question.startswith("Ann"))
    assert ann.meta["solution"] == "She had 3*4=12 apples.\nAfter eating 2 she has 12-2=10."
    assert ann.task_type == "reasoning" and ann.scenario == "math"


def test_svamp_answer_as_plain_number_and_body_with_question() -> None:
    items = by_id(load("svamp"))
    assert items["svamp/test/chal-1"].references == ["5"]
    assert items["svamp/test/chal-3"].references == ["2.5"]
    assert items["svamp/test/chal-2"].question == ("Each bag holds 2.5 kg of rice. There are 2 bags. "
                                                   "How much rice is there?")
    assert items["svamp/test/chal-1"].meta["equation"] == "( 8.0 - 3.0 )"


def test_theoremqa_answers_by_type_and_picture_questions_left_out() -> None:
    adapter = get_adapter("theoremqa", FIX)
    instances, report = adapter.load()
    items = by_id(instances)
    assert report.n_filtered == 1 and "picture" in report.filtered[0]
    assert items["theoremqa/test/1"].references == ["12"]
    assert items["theoremqa/test/2"].references == ["True"]
    assert items["theoremqa/test/4"].references == ["[2, 3]"]
    assert items["theoremqa/test/1"].task_type == "science"
    assert len(load("theoremqa", with_pictures=True)) == 4


# --- code / agent ---------------------------------------------------------------------------------------
def _passes(program: str, tests: str) -> bool:
    scope: dict[str, Any] = {}
    exec(compile(program + "\n" + tests, "<test>", "exec"), scope)  # trusted package data and fixtures
    return True


def test_humaneval_packaged_data_read_for_real() -> None:
    adapter = get_adapter("humaneval")
    assert adapter.offline_available() and str(adapter.packaged_path()).endswith("HumanEval.jsonl.gz")
    instances, report = adapter.load(limit=None)
    assert len(instances) == 164 and report.split == "test"
    item = by_id(instances)["humaneval/test/HumanEval/0"]
    assert item.meta["entry_point"] == "has_close_elements" and "def check(candidate)" in item.meta["tests"]
    assert item.question == item.meta["prompt"] and item.references[0].startswith(item.meta["prompt"])
    # the mapped reference passes the mapped tests (proves prompt, solution, tests and entry point line up)
    for inst in instances[:5]:
        assert _passes(inst.references[0], inst.meta["tests"] + f"\ncheck({inst.meta['entry_point']})")


def test_mbpp_tests_in_context_and_meta() -> None:
    items = by_id(load("mbpp"))
    item = items["mbpp/test/12"]
    assert item.meta["tests"] == ["assert reverse_string('ab') == 'ba'", "assert reverse_string('') == ''"]
    assert item.context == "Tests:\nassert reverse_string('ab') == 'ba'\nassert reverse_string('') == ''"
    assert item.meta["entry_point"] == "reverse_string"  # the tested function, not the helper
    assert _passes(item.references[0], "\n".join(item.meta["tests"]))


def test_xlam_tools_as_context_and_calls_as_references() -> None:
    item = by_id(load("xlam"))["xlam/train/8"]
    assert item.context.splitlines()[0] == "Available tools:"
    assert json.loads(item.context.splitlines()[1])["name"] == "convert"
    assert json.loads(item.references[0]) == [
        {"name": "convert", "arguments": {"amount": 10, "from": "USD", "to": "EUR"}},
        {"name": "get_time", "arguments": {"city": "Tokyo"}}]
    assert item.meta["tool_names"] == ["convert", "get_time"] and item.question.startswith("Convert 10 USD")


# --- packaged HaluEval ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "task", "context_field"), [
    ("halueval_qa", "grounded_qa", "knowledge"), ("halueval_dialogue", "dialogue", "knowledge"),
    ("halueval_summarization", "summarization", "document")])
def test_halueval_packaged_data_read_for_real(name: str, task: str, context_field: str) -> None:
    adapter = get_adapter(name)
    assert adapter.offline_available()
    instances, report = adapter.load(limit=5)
    assert len(instances) == 5 and report.origin.endswith(".jsonl")
    for inst in instances:
        assert inst.task_type == task and inst.context == inst.source[context_field]
        assert len(inst.references) == 1 and len(inst.incorrect) == 1 and inst.references != inst.incorrect


def test_halueval_dialogue_history_one_turn_per_line() -> None:
    inst = load("halueval_dialogue", limit=1, data_dir=None)[0]
    lines = inst.question.splitlines()
    assert len(lines) >= 1 and all(line.startswith(("[Human]: ", "[Assistant]: ")) for line in lines)
    assert lines[-1].startswith("[Human]: ")  # the reply to write is the assistant's next turn
    assert " ".join(lines).replace(" ", "") == inst.source["dialogue_history"].replace(" ", "")


# --- loading machinery ------------------------------------------------------------------------------------
def test_seeded_shuffle_is_deterministic_and_limit_takes_a_prefix() -> None:
    adapter = get_adapter("halueval_qa")
    a, _ = adapter.load(limit=6, seed=1)
    b, _ = adapter.load(limit=6, seed=1)
    c, _ = adapter.load(limit=6, seed=2)
    longer, _ = adapter.load(limit=9, seed=1)
    assert [i.id for i in a] == [i.id for i in b] != [i.id for i in c]
    assert [i.id for i in longer[:6]] == [i.id for i in a]


def test_split_fallback_order() -> None:
    assert get_adapter("gsm8k").pick_split(["train", "test"], "x") == "test"
    assert get_adapter("commonsenseqa").pick_split(["train", "validation", "test"], "x") == "validation"
    assert get_adapter("squad_v2").pick_split(["train", "validation"], "x") == "validation"
    assert get_adapter("xlam").pick_split(["train"], "x") == "train"
    assert get_adapter("gsm8k", params={"split": "train"}).pick_split(["train", "test"], "x") == "train"
    with pytest.raises(HaldetError, match="split dev not available"):
        get_adapter("gsm8k", params={"split": "dev"}).pick_split(["train", "test"], "x")


def test_hub_loading_calls_load_dataset_with_id_config_and_fallback_split(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls: list[tuple[str, str | None, str]] = []
    rows = {lang: read_table(FIX / "belebele" / f"{lang}.jsonl") for lang in ("eng_Latn", "fra_Latn")}
    monkeypatch.setattr(datasets, "get_dataset_split_names", lambda hub, config=None: ["train", "test"])

    def fake_load(hub: str, config: str | None = None, split: str = "") -> list[dict[str, Any]]:
        calls.append((hub, config, split))
        return rows[config] if hub == "facebook/belebele" and config else read_table(FIX / "gsm8k" / "test.jsonl")

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    items = load("gsm8k", data_dir=None)
    assert calls == [("openai/gsm8k", "main", "test")] and len(items) == 3 and items[0].id.startswith("gsm8k/test/")
    calls.clear()
    items = load("belebele", data_dir=None, languages=["eng_Latn", "fra_Latn"])
    assert calls == [("facebook/belebele", "eng_Latn", "test"), ("facebook/belebele", "fra_Latn", "test")]
    assert sorted(i.meta["language"] for i in items) == ["eng_Latn", "eng_Latn", "fra_Latn"]


def test_unreachable_hub_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    def offline(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "get_dataset_split_names", offline)
    with pytest.raises(HaldetError) as err:
        load("xsum", data_dir=None)
    assert "EdinburghNLP/xsum" in err.value.message and "--data-dir" in err.value.message
    assert "DIR/xsum/" in err.value.hint and "--data-file" in err.value.hint and "docs/datasets.md" in err.value.hint


# --- bad input --------------------------------------------------------------------------------------------
def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(HaldetError) as err:
        get_adapter("nope")
    assert "unknown dataset 'nope'" in err.value.message
    assert all(name in err.value.message for name in NAMES)


def test_unknown_adapter_option_lists_known_ones() -> None:
    with pytest.raises(HaldetError) as err:
        get_adapter("belebele", params={"languagez": ["x"]})
    assert "languagez" in err.value.message and "languages" in err.value.hint


def test_missing_local_file_names_the_file_and_expected_fields(tmp_path: Path) -> None:
    with pytest.raises(HaldetError) as err:
        load("squad_v2", data_dir=tmp_path)
    msg = err.value.message
    assert str(tmp_path / "squad_v2") in msg and "--data-file" in msg
    assert "id, context, question, answers" in msg and "SQuAD v2.0 release" in msg


def test_bad_row_names_row_and_field_and_skip_counts() -> None:
    adapter = get_adapter("gsm8k", FIX / "bad")
    with pytest.raises(HaldetError) as err:
        adapter.load(seed=0)
    assert "line " in err.value.message and "'answer'" in err.value.message and "--on-bad-row skip" in err.value.hint
    instances, report = adapter.load(seed=0, on_bad_row="skip")
    assert sorted(i.references[0] for i in instances) == ["2", "4"]
    # rows are named by their file line, 1-based
    assert report.n_skipped == 2 and sorted(r.split(":")[0] for r in report.skipped) == ["line 2", "line 3"]
    assert any("field 'answer': missing" in r for r in report.skipped)
    assert any("no '#### <number>'" in r for r in report.skipped)
    assert "2 bad rows skipped" in report.summary()


def test_malformed_json_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "xsum").mkdir()
    (tmp_path / "xsum" / "test.jsonl").write_text('{"id": "1", "document": "d", "summary": "s"}\n{"id": 2,\n')
    with pytest.raises(HaldetError) as err:
        load("xsum", data_dir=tmp_path)
    assert "line 2" in err.value.message


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    (tmp_path / "xsum").mkdir()
    row = json.dumps({"id": "7", "document": "d", "summary": "s"})
    (tmp_path / "xsum" / "test.jsonl").write_text(row + "\n" + row + "\n")
    with pytest.raises(HaldetError, match="same id 'xsum/test/7'"):
        load("xsum", data_dir=tmp_path)


def test_a_new_adapter_is_one_class_and_one_decorator(tmp_path: Path) -> None:
    @register("tiny_test_dataset")
    class Tiny(DatasetAdapter):
        scenario, task_type, source, license = "qa_open", "short_answer", "test", "CC0"
        required_fields = ("q", "a")

        def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
            if not row.get("a"):
                raise BadRow("a")
            return self.instance(split, index, question=row["q"], references=[row["a"]])

    try:
        (tmp_path / "tiny_test_dataset_validation.jsonl").write_text('{"q": "2+2?", "a": "4"}\n')
        (item,) = load("tiny_test_dataset", data_dir=tmp_path)
        assert item.id == "tiny_test_dataset/validation/0" and item.references == ["4"]
    finally:
        DATASETS._items.pop("tiny_test_dataset")


# --- CLI ------------------------------------------------------------------------------------------------
def test_cli_datasets_list_json(cli: Any) -> None:
    proc = cli("datasets", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    infos = {d["name"]: d for d in json.loads(proc.stdout)}
    assert set(NAMES) <= set(infos)
    for info in infos.values():
        assert {"name", "scenario", "task_type", "source", "license", "offline"} <= set(info)
    assert infos["halueval_qa"]["offline"] and infos["humaneval"]["offline"] and not infos["xsum"]["offline"]
    assert infos["belebele"]["hub_config"] == list(get_adapter("belebele").languages())


def test_cli_datasets_show_json_and_bad_rows(cli: Any) -> None:
    proc = cli("datasets", "show", "coqa", "--data-dir", str(FIX), "--limit", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert len(shown) == 2 and all(s["task_type"] == "dialogue" for s in shown)
    proc = cli("datasets", "show", "gsm8k", "--data-dir", str(FIX / "bad"), "--limit", "10", "--on-bad-row", "skip",
               "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 2 and "2 bad rows skipped" in proc.stderr
    proc = cli("datasets", "show", "gsm8k", "--data-dir", str(FIX / "bad"), "--limit", "10")
    assert proc.returncode == 2 and "field 'answer'" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("datasets", "show", "belebele", "--data-dir", str(FIX), "--option", "languages=[fra_Latn]", "--prompt")
    assert proc.returncode == 0, proc.stderr
    assert "Dans les collines du nord" in proc.stdout and "Reply with the letter" in proc.stdout
