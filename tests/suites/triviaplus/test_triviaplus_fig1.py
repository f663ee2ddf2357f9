"""TRIVIA+ Fig. 1: the test answers placed by a projection fitted on the training answers, from the hidden states a
run stored, read through the run's reader (records under the run's keys only), drawn by `haldet report` as files.

UMAP itself is not run here: umap-learn compiles its kernels with numba on first use (about 35 s on this machine),
so these tests take the same path with PCA (`answer_map: pca`), whose coordinates are checked against numpy's SVD."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from haldet.datasets.base import get_adapter
from haldet.report.build import write_reports
from haldet.report.rundata import load_run
from haldet.store import RunStore
from haldet.store.reader import RunReader
from haldet.suites.triviaplus.embedding_map import answer_map, project
from repo_paths import FIXTURES

DATA = FIXTURES / "datasets"
MODEL = "m"


def synthetic_run(root: Path, pooled: str = "hidden_mean") -> tuple[dict[str, np.ndarray], dict[str, str],
                                                                     dict[str, str]]:
    """A run of the TRIVIA+ fixture whose features stage stored `hidden_mean` [2 layers, 4] per item: layer 0 noise,
    the last layer the item's label plus a small offset (what the map must use); plus one record of other settings
    for every item, under a key the run did not record (what the map must not use)."""
    items, _ = get_adapter("triviaplus", DATA).load()
    rng = np.random.default_rng(0)
    last = {i.id: np.r_[3.0 * (i.response_label == "hallucination"), rng.normal(0, 0.3, 3)] for i in items}
    arrays = {i: {pooled: np.stack([rng.normal(0, 50, 4), v])} for i, v in last.items()}
    store = RunStore(root)
    store.write_manifest({"run_format": 3, "config": {
        "suite": "triviaplus", "datasets": ["triviaplus"], "models": [MODEL], "data_dir": str(DATA),
        "suite_params": {"triviaplus": {"answer_map": "pca"}}}, "cells": [{"dataset": "triviaplus", "model": MODEL}]})
    store.write_results([])
    cell = store.cell("triviaplus", MODEL)
    shard = cell.arrays("features").write(arrays, dtype="float64")
    records = [{"id": i, "key": "run", "shard": shard, "arrays": {pooled: [2, 4]}} for i in arrays]
    other = cell.arrays("features").write({i: {pooled: np.full((2, 4), 99.0)} for i in arrays})
    cell.log("features").append(records + [{**r, "key": "other", "shard": other} for r in records])
    cell.log("generate").append([{"id": i, "key": "g"} for i in arrays])
    cell.record_stage_keys({"features": {r["id"]: r for r in records}, "generate": {i: "g" for i in arrays}})
    split = {p: sorted(i.id for i in items if i.split == p) for p in ("train", "val", "test")}
    cell.write_json("split.json", split)
    labels = {i.id: str(i.response_label.value) for i in items}
    return last, labels, {i: p for p, ids in split.items() for i in ids}


@pytest.mark.parametrize("pooled", ["hidden_mean", "hidden_last"])  # whichever pooling the run's detectors read
def test_pca_map_is_fitted_on_train_from_the_runs_own_last_layer(tmp_path: Path, pooled: str) -> None:
    last, labels, parts = synthetic_run(tmp_path, pooled)
    plot = answer_map(RunReader(tmp_path).cell("triviaplus", MODEL), labels, "t", "n", "pca")
    assert plot is not None
    train = np.stack([last[i] for i in sorted(last) if parts[i] == "train"])
    test = sorted(i for i in last if parts[i] == "test")
    centred = train - train.mean(axis=0)
    axes = np.linalg.svd(centred, full_matrices=False)[2][:2]
    expected = (np.stack([last[i] for i in test]) - train.mean(axis=0)) @ axes.T  # PCA by hand (signs aside)
    drawn = {tuple(np.round(np.abs(p), 9)) for pts in plot.groups.values() for p in pts}
    assert drawn == {tuple(np.round(np.abs(p), 9)) for p in expected}
    n_bad = sum(labels[i] == "hallucination" for i in test)
    assert (len(plot.groups["hallucinated"]), len(plot.groups["faithful"])) == (n_bad, len(test) - n_bad)
    assert "fitted on" in plot.note and f"{len(train)} training answers" in plot.note
    assert ("mean over the answer tokens" if pooled == "hidden_mean" else "the last answer token") in plot.note
    # the first principal axis is the label direction: hallucinated test answers sit on one side, faithful on the other
    firsts = {g: [x for x, _ in pts] for g, pts in plot.groups.items()}
    assert max(firsts["faithful"]) < min(firsts["hallucinated"]) or max(firsts["hallucinated"]) < min(
        firsts["faithful"])


def test_report_draws_fig1_as_files(tmp_path: Path) -> None:
    synthetic_run(tmp_path / "run")
    written = write_reports(tmp_path / "out", [load_run(tmp_path / "run")])
    names = sorted(n for n in written if n.startswith("figures/triviaplus-fig1"))
    assert names == [f"figures/triviaplus-fig1-triviaplus-{MODEL}.{x}" for x in ("pdf", "png")]
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Fig. 1: triviaplus test answers" in html and "placed by a PCA fitted on" in html


def test_projection_refuses_an_unknown_method() -> None:
    with pytest.raises(ValueError, match="umap or pca"):
        project(np.zeros((6, 3)), np.zeros((2, 3)), "tsne")
