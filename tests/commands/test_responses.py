"""Bring your own responses without a model: the `responses` adapter (columns, labels, units, files of every
format), its messages, the labels trained detectors need, the split and metrics of the `responses` suite."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import haldet
from haldet.cli import app
from haldet.commands.responses import base_config, responses_config, write_input
from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.evaluation.metrics import evaluate
from haldet.evaluation.units import UnitData
from haldet.flow.protocol import SuiteProcedure
from haldet.schema import Category
from haldet.stages.base import Item
from haldet.suites.base import get_suite

ROWS = [
    {"question": "Capital of France?", "answer": "Paris is the capital.", "label": 0, "id": "q1"},
    {"prompt": "Who wrote Hamlet?", "response": "Charles Dickens wrote it in 1700.", "label": "hallucination",
     "context": "Hamlet is a play by Shakespeare.",
     "units": [{"text": "Charles Dickens", "label": 1, "kind": "entity"}, {"start": 28, "end": 32, "label": 1,
                                                                        "kind": "entity"}]},
    {"question": "2 + 2?", "response": "4", "label": None},
    {"question": "Largest ocean?", "response": "The Pacific.", "label": "true"},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def load(path: Path) -> list:
    return get_adapter("responses", path).load()[0]


def test_columns_labels_and_units_map_into_items(tmp_path: Path) -> None:
    items = load(write_jsonl(tmp_path / "r.jsonl", ROWS))
    assert [i.id for i in items] == ["responses/data/q1", "responses/data/1", "responses/data/2", "responses/data/3"]
    assert [i.response_label for i in items] == [Category.CORRECT, Category.HALLUCINATION, None,
                                                 Category.HALLUCINATION]
    assert items[0].question == "Capital of France?" and items[0].response == "Paris is the capital."
    assert items[1].context == "Hamlet is a play by Shakespeare."
    units = items[1].units_of("entity")
    assert [(u.start, u.end, u.text, u.binary) for u in units] == [(0, 15, "Charles Dickens", 1),
                                                                   (28, 32, "1700", 1)]


def test_csv_and_parquet_files_read_like_json_lines(tmp_path: Path) -> None:
    frame = pd.DataFrame([{"question": r.get("question") or r["prompt"], "response": r.get("response") or r["answer"],
                           "label": None if r["label"] is None else str(r["label"])} for r in ROWS])
    frame.to_csv(tmp_path / "r.csv", index=False)
    frame.to_parquet(tmp_path / "r.parquet")
    for name in ("r.csv", "r.parquet"):
        labels = [i.response_label for i in load(tmp_path / name)]
        assert labels == [Category.CORRECT, Category.HALLUCINATION, None, Category.HALLUCINATION], name


def test_a_missing_column_names_itself_the_file_and_the_accepted_names(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"query": "q", "response": "a"}])
    with pytest.raises(HaldetError) as err:
        load(path)
    assert "missing column for the prompt (accepted names: prompt, question" in err.value.what
    assert "columns found: query, response" in err.value.what and err.value.where == str(path)


def test_a_bad_cell_names_its_line_and_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [ROWS[0], {"question": "q", "response": "a", "label": "maybe"}])
    with pytest.raises(HaldetError, match=r"line 2 .*field 'label': must be 1/true/hallucination"):
        load(path)
    path = write_jsonl(tmp_path / "u.jsonl", [{"question": "q", "response": "abc", "units": [{"text": "zz"}]}])
    with pytest.raises(HaldetError, match=r"units\[0\].*'zz' not found in the response"):
        load(path)


def test_rows_in_memory_are_written_as_plain_json(tmp_path: Path) -> None:
    frame = pd.DataFrame({"question": ["a", "b"], "response": ["x", "y"], "label": [np.int64(1), np.nan]})
    lines = write_input(frame, tmp_path / "in.jsonl").read_text().splitlines()
    assert [json.loads(line)["label"] for line in lines] == [1, None]
    with pytest.raises(HaldetError, match="row 2 is a str"):
        write_input([{"question": "a", "response": "x"}, "oops"], tmp_path / "bad.jsonl")


def test_trained_detectors_are_refused_without_labels_before_any_work(tmp_path: Path) -> None:
    rows = [{"question": f"q{i}", "response": f"a{i}"} for i in range(4)]
    with pytest.raises(HaldetError, match=r"saplma are trained on labels, but no response has a label") as err:
        haldet.score_responses(rows, detectors=["perplexity", "saplma"], out=tmp_path / "run", progress=False)
    assert "add a `label` column" in err.value.hint and err.value.where == "score_responses(data=...)"
    assert not (tmp_path / "run").exists()
    path = write_jsonl(tmp_path / "r.jsonl", [*rows, {"question": "q", "response": "a", "label": 1}])
    config = responses_config(path, base_config(path, ["smollm2-135m"], ["saplma"]))  # one label is enough
    assert config.suite == "responses" and config.suite_params["responses"]["levels"] == ["response"]


def test_unit_levels_come_from_the_units_given(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", ROWS)
    config = responses_config(path, base_config(path, ["smollm2-135m"], ["likelihood"]))
    assert config.suite_params["responses"]["levels"] == ["response", "entity"]
    assert SuiteProcedure(config, get_suite("responses")).levels == ("response", "entity")


def test_every_item_is_a_test_item_unless_a_detector_is_fitted(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"question": f"q{i}", "response": "a", "label": i % 2}
                                              for i in range(10)])
    items = [Item(instance=inst, prompt="") for inst in load(path)]
    free = SuiteProcedure(base_config(path, ["m"], ["perplexity"]), get_suite("responses"))
    split, recorded = free.split(items, {})
    assert split == {"train": [], "val": [], "test": sorted(i.id for i in items)} and recorded == {"grouped": "none"}
    trained = SuiteProcedure(base_config(path, ["m"], ["perplexity", "saplma"]), get_suite("responses"))
    split, _ = trained.split(items, {})
    assert [len(split[p]) for p in ("train", "val", "test")] == [6, 2, 2]


def test_metrics_only_where_labelled_and_openhaldets_at_response_level() -> None:
    suite = get_suite("responses")
    y, s = np.array([0, 1, 0, 1, 1, 0]), np.array([0.1, 0.9, 0.4, 0.35, 0.8, 0.2])
    unlabelled = UnitData(np.full(6, -1), s, np.arange(6))
    assert suite.unit_metrics("response", unlabelled, None, n_boot=50, ci=0.95, seed=1) == []
    got = suite.unit_metrics("response", UnitData(y, s, np.arange(6)), None, n_boot=50, ci=0.95, seed=1)
    assert got == evaluate(y, s, n_boot=50, ci=0.95, seed=1)
    assert next(m for m in got if m.metric == "auroc").value == pytest.approx(8 / 9)  # 8 of 9 pairs ordered
    empty_val = UnitData(np.array([], dtype=int), np.array([]), np.array([], dtype=int))
    units = suite.unit_metrics("entity", UnitData(y, s, np.arange(6)), empty_val, n_boot=50, ci=0.95, seed=1)
    threshold = next(m for m in units if m.metric == "threshold")
    assert threshold.value is None and threshold.note == "no validation units: no threshold"


def test_the_cli_refuses_clashing_flags_and_names_a_missing_column(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"question": "q", "reply": "a"}])
    runner = CliRunner()  # the app raises; the entry point prints the message and exits 2
    out = runner.invoke(app, ["run", "--responses", str(path), "--dataset", "halueval_qa", "--out", str(tmp_path)])
    assert isinstance(out.exception, HaldetError) and "--dataset cannot be given with it" in out.exception.what
    out = runner.invoke(app, ["run", "--responses", str(path), "--out", str(tmp_path / "o")])
    assert isinstance(out.exception, HaldetError) and "missing column for the response" in out.exception.what
    assert out.exception.where == str(path) and not (tmp_path / "o").exists()


def test_load_run_of_a_responses_run_gives_data_labels_and_unit_texts(tmp_path: Path) -> None:
    """A hand-written `responses` run: labels and units are read back from its data file, scores per unit."""
    from haldet.store import RunStore

    data = write_jsonl(tmp_path / "r.jsonl", ROWS)
    config = responses_config(data, base_config(data, ["m"], ["likelihood"]))
    store = RunStore(tmp_path / "run")
    store.write_manifest({"config": config.canonical()})  # running: no cell finished, no results yet
    cell = store.cell("responses", "m")
    ids = [i.id for i in load(data)]
    cell.log("generate").append([{"id": i, "key": "g", "prompt": "p", "response": "r", "provided": True}
                                 for i in ids])
    running = haldet.load_run(tmp_path / "run")
    assert len(running.items) == 4 and running.scores.empty and running.results.empty
    assert running.notes == ["no cell has finished yet: no results",
                             "responses | m is still running: its items so far, no scores yet"]
    store.write_manifest({"config": config.canonical(), "cells": [{"dataset": "responses", "model": "m", "detectors": [
        {"name": "likelihood", "level": "entity", "key": "k"}]}]})
    store.write_results([])
    cell.write_json("split.json", {"train": [], "val": [], "test": ids})
    cell.log("scores/likelihood@entity").append([{"id": ids[1], "key": "k", "values": [2.5, None],
                                                  "reasons": ["", "no token overlaps the unit"]}])
    run = haldet.load_run(tmp_path / "run")
    labels = run.labels.set_index("id")
    assert labels.loc[ids[1], "label"] == 1 and labels.loc[ids[0], "label_source"] == "data"
    assert ids[2] not in labels.index  # unlabelled: scored, never evaluated
    table = run.table("entity")
    assert table[["unit_text", "unit_label", "likelihood"]].to_dict("list") == {
        "unit_text": ["Charles Dickens", "1700"], "unit_label": [1, 1], "likelihood": [2.5, pytest.approx(np.nan,
                                                                                                        nan_ok=True)]}
    assert run.items.set_index("id").loc[ids[1], "context"] == "Hamlet is a play by Shakespeare."


def hand_written_run(tmp_path: Path, scores: dict[str, list[float]]) -> tuple[Path, list[str]]:
    """A finished `responses` run written by hand: ROWS as the data, each detector's response-level scores."""
    from haldet.store import RunStore

    data = write_jsonl(tmp_path / "r.jsonl", ROWS)
    config = responses_config(data, base_config(data, ["m"], list(scores)))
    store = RunStore(tmp_path / "run")
    ids = [i.id for i in load(data)]
    store.write_manifest({"config": config.canonical(), "status": "done", "cells": [
        {"dataset": "responses", "model": "m", "detectors": [{"name": d, "level": "response", "key": "k"}
                                                             for d in scores]}]})
    store.write_results([])
    cell = store.cell("responses", "m")
    cell.write_json("split.json", {"train": [], "val": [], "test": ids})
    cell.log("generate").append([{"id": i, "key": "g", "prompt": "p", "response": "r", "provided": True}
                                 for i in ids])
    for name, values in scores.items():
        cell.log(f"scores/{name}@response").append([{"id": i, "key": "k", "values": [v], "reasons": [""]}
                                                    for i, v in zip(ids, values, strict=True)])
    return tmp_path / "run", ids


def test_compare_reads_the_labels_your_data_gives(tmp_path: Path) -> None:
    """`haldet compare` on a responses run: its labels come from the data (no judge ran), its scores are found."""
    run, _ = hand_written_run(tmp_path, {"perplexity": [1.0, 5.0, 3.0, 4.0], "entropy": [2.0, 1.0, 9.0, 3.0]})
    out = CliRunner().invoke(app, ["compare", str(run), "perplexity", "entropy", "--json", "--n-boot", "50"])
    assert out.exit_code == 0, out.output
    (cmp,) = json.loads(out.output)
    # labelled: q1 (0), item 2 (1), item 4 (1); item 3 is unlabelled
    assert (cmp["n"], cmp["n_pos"]) == (3, 2)
    assert cmp["auroc_a"] == pytest.approx(1.0) and cmp["auroc_b"] == pytest.approx(0.5)


def test_your_own_ids_come_back_beside_haldets_for_a_one_line_merge(tmp_path: Path) -> None:
    run, ids = hand_written_run(tmp_path, {"perplexity": [1.0, 5.0, 3.0, 4.0]})
    mine = pd.DataFrame({"id": ["q1", 1, 2, 3], "team": ["a", "b", "c", "d"]})  # ROWS: only q1 has an id
    table = haldet.load_run(run).table()
    assert table["id"].tolist() == ids and table["source_id"].tolist() == ["q1", 1, 2, 3]
    merged = table.merge(mine, left_on="source_id", right_on="id", suffixes=("", "_mine"))
    assert merged.set_index("id")["team"].to_dict() == dict(zip(ids, "abcd", strict=True))
    # the explorer's item list shows your id beside haldet's
    from fastapi.testclient import TestClient

    from haldet.explorer.app import create_app
    from haldet.explorer.data import Explorer

    client = TestClient(create_app(Explorer([run])), base_url="http://127.0.0.1")
    page = client.get("/items", params={"run": 0, "dataset": "responses", "model": "m"}).text
    assert f'{ids[0]}</a> <span class="source-id" title="your own id">(q1)</span>' in page


def test_a_file_of_your_own_is_told_what_to_do_with_it(tmp_path: Path) -> None:
    """An empty file, a file that is not UTF-8 (its line and byte offset), every wrong-typed Parquet column."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(HaldetError) as err:
        load(empty)
    assert err.value.what == "your responses file is empty" and "download" not in err.value.hint
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"question": "a", "response": "b"}\n{"question": "caf\xe9", "response": "c"}\n')
    with pytest.raises(HaldetError) as err:
        load(latin)
    assert err.value.what == "your responses file is not UTF-8 text (byte 0xe9 at byte offset 52, line 2)"  # 36 + 16
    assert err.value.where == f"{latin}, line 2" and "release" not in err.value.hint and "UTF-8" in err.value.hint
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"question": ["q1", "q2"], "response": [[1, 2], [3]], "label": [{"a": 1}, {"a": 2}],
                  "context": [1.5, 2.5]}).to_parquet(bad)
    with pytest.raises(HaldetError) as err:
        load(bad)
    what = err.value.what
    assert what.startswith("3 column(s) of your responses file hold the wrong type")
    for col, kind in (("response", "list"), ("context", "float"), ("label", "dict")):
        assert f"'{col}' holds {kind} values (row 1" in what
    assert "'question'" not in what


def test_edited_data_is_said_by_id_and_another_config_is_left_to_the_config_check(tmp_path: Path) -> None:
    from haldet.commands.data_changes import ITEMS_FILE, changes, check_same_data, item_record
    from haldet.store import RunStore

    data = write_jsonl(tmp_path / "r.jsonl", ROWS)
    config = responses_config(data, base_config(data, ["m"], ["perplexity"]))
    old = load(data)
    RunStore(tmp_path / "run").write_manifest({"config": config.canonical()})
    (tmp_path / "run" / ITEMS_FILE).write_text(json.dumps(item_record(old)))
    edited = write_jsonl(data, [dict(ROWS[0], label=1), *ROWS[1:3]])
    new = load(edited)
    assert changes(item_record(old), item_record(new)) == ["1 item removed (3)", "1 label differs (q1)"]
    with pytest.raises(HaldetError, match=r"differ from those .*: 1 item removed \(3\); 1 label differs \(q1\)"):
        check_same_data(tmp_path / "run", config, new, update=False, given="--responses r.jsonl", api=False)
    assert check_same_data(tmp_path / "run", config, new, update=True, given="x", api=False) == [
        "1 item removed (3)", "1 label differs (q1)"]
    limited = config.model_copy(update={"limit": 3})  # another config: the run's own check refuses it, by name
    assert check_same_data(tmp_path / "run", limited, new, update=False, given="x", api=False) == []
