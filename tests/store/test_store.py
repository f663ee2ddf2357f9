"""Run store: atomic appends, torn-line recovery, key filtering, HDF5 shards."""

import json

import h5py
import numpy as np
import pytest

from haldet.errors import HaldetError
from haldet.store import ArrayStore, RunStore, StageLog


def test_append_and_read_with_keys(tmp_path):
    log = StageLog(tmp_path / "generate.jsonl")
    log.append([{"id": "a", "key": "k1", "v": 1}, {"id": "b", "key": "k1", "v": 2}])
    log.append([{"id": "a", "key": "k2", "v": 3}])
    assert {i: r["v"] for i, r in log.read("k1").items()} == {"a": 1, "b": 2}
    assert {i: r["v"] for i, r in log.read({"a": "k2", "b": "k1"}).items()} == {"a": 3, "b": 2}
    assert log.read({"a": "k3"}) == {}


def test_reading_a_few_ids_parses_only_their_records(tmp_path, monkeypatch):
    """A stage checks each batch against its whole log before appending: reading a few ids must not parse every
    record (that made a 5,000-item run's generate stage quadratic, docs/scale.md)."""
    import haldet.store.files as files

    log = StageLog(tmp_path / "generate.jsonl")
    log.append([{"id": f"item{i}", "key": "k", "nested": {"id": "item7", "v": list(range(5))}} for i in range(500)])
    with open(log.path, "a") as fh:  # an older writer's spacing: parsed whole, still filtered right
        fh.write(json.dumps({"id": "item7", "key": "old"}) + "\n")
    parsed = []
    real_loads = files.json.loads
    monkeypatch.setattr(files.json, "loads", lambda raw, *a, **k: parsed.append(raw) or real_loads(raw, *a, **k))
    found = log.read({"item7": "k", "item300": "k", "missing": "k"})
    assert sorted(found) == ["item300", "item7"] and found["item7"]["nested"]["v"] == [0, 1, 2, 3, 4]
    assert len(parsed) == 3  # the two wanted records and the line whose id is not its first field
    assert log.read({"item7": "old"})["item7"]["key"] == "old"


def test_torn_last_line_is_ignored_then_repaired(tmp_path):
    path = tmp_path / "s.jsonl"
    log = StageLog(path)
    log.append([{"id": "a", "key": "k", "v": 1}])
    with open(path, "a") as fh:  # a writer killed mid-line
        fh.write('{"id": "b", "key": "k", "v"')
    assert set(log.read("k")) == {"a"}
    log.append([{"id": "b", "key": "k", "v": 2}])
    lines = path.read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["a", "b"]


def test_corrupt_middle_line_names_file_and_line(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": "a", "key": "k"}\nnot json\n{"id": "b", "key": "k"}\n')
    with pytest.raises(HaldetError, match="line 2") as info:
        StageLog(path).read()
    assert str(path) in info.value.message


def test_record_needs_id_and_key(tmp_path):
    with pytest.raises(ValueError):
        StageLog(tmp_path / "x.jsonl").append([{"id": "a"}])


def test_array_shards_float16_per_item(tmp_path):
    store = ArrayStore(tmp_path / "features")
    hidden = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    shard = store.write({"ds/test/1": {"hidden": hidden, "ids": np.arange(4)}})
    assert not list((tmp_path / "features").glob(".*tmp"))
    back = store.read(shard, "ds/test/1", "hidden")
    assert back.dtype == np.float16 and back.shape == (3, 8)
    np.testing.assert_allclose(back, hidden, atol=1e-2)
    assert store.read(shard, "ds/test/1", "ids").dtype.kind == "i"
    with h5py.File(tmp_path / "features" / shard) as fh:  # plain HDF5, readable by any tool
        assert fh["ds|test|1"]["hidden"].dtype == np.float16
    assert [a.shape for a in store.read_many([(shard, "ds/test/1")], "hidden")] == [(3, 8)]


def test_results_json_and_csv(tmp_path):
    store = RunStore(tmp_path)
    rows = [{"dataset": "d", "metric": "auroc", "value": 0.5, "ci_low": None}]
    store.write_results(rows)
    assert json.loads((tmp_path / "results.json").read_text()) == rows
    assert (tmp_path / "results.csv").read_text().splitlines()[0] == "dataset,metric,value,ci_low"
    assert store.read_results() == rows
