"""Keys cover what actually ran: a substitute NLI model's scores never answer for the requested model, the pair
cache is filed by model fingerprint, and the manifest-bound identity names version, variant and models."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from haldet.config import RunConfig
from haldet.flow.scoring import DetectorRun, ResponseScoring, score_detector
from haldet.models.provenance import locate, pair_model_identity, substitutes
from haldet.signals import Signal
from haldet.store import CellStore
from haldet.testing.conformance import split_of, synthetic_view


def tiny_nli(path: Path, seed: int) -> Path:
    from tiny_llama import build_tiny_nli

    return build_tiny_nli(path, seed=seed)


def run_nli(cell: Path, requested: Path, fallback: Path) -> DetectorRun:
    view = synthetic_view({Signal.RESPONSE, Signal.SAMPLES}, n=20)
    config = RunConfig(detectors=["selfcheck_nli"], evaluation={"bootstrap": 0}, detector_params={
        "selfcheck_nli": {"nli_model": str(requested), "fallback": str(fallback)}})
    return score_detector("selfcheck_nli", "response", ResponseScoring(config), CellStore(cell), view,
                          split_of(view), "ev")


def test_substitute_scores_are_not_reused_for_the_real_model(tmp_path: Path) -> None:
    real, sub = tmp_path / "real-nli", tiny_nli(tmp_path / "substitute-nli", seed=1)
    first = run_nli(tmp_path / "cell", real, sub)            # the requested model is absent: the substitute runs
    models = first.identity["models"]
    assert models["nli_model"]["substitute"] and models["nli_model"]["used"] == str(sub)
    assert substitutes(first.identity) == [f"{real} -> {sub}"]
    assert first.meta["nli_model"]["loaded"] == str(sub) and not first.cached
    again = run_nli(tmp_path / "cell", real, sub)
    assert again.cached and again.key == first.key           # same situation: reused
    tiny_nli(real, seed=2)                                   # the real model becomes available
    later = run_nli(tmp_path / "cell", real, sub)
    assert not later.cached and later.key != first.key
    assert later.meta["nli_model"]["loaded"] == str(real) and not later.identity["models"]["nli_model"]["substitute"]
    assert not np.array_equal(later.scores.values, first.scores.values, equal_nan=True)
    # each model's pairs are filed separately, by fingerprint
    assert len(list((tmp_path / "cell" / "pairs").glob("*.jsonl"))) == 2


def test_fingerprint_follows_the_files(tmp_path: Path) -> None:
    path = tiny_nli(tmp_path / "m", seed=0)
    before = locate(str(path))
    assert before and before.startswith("dir:")
    (path / "config.json").write_text((path / "config.json").read_text().replace('"hidden_act"', '"hidden_act" '))
    assert locate(str(path)) != before
    assert locate(str(tmp_path / "absent")) is None
    ident = pair_model_identity("nli", str(tmp_path / "absent"), None, 512)
    assert ident["used"] is None and ident["max_length"] == 512


def test_detector_key_changes_with_version_and_variant(tmp_path: Path) -> None:
    from haldet.detectors.base import DETECTORS

    cls = DETECTORS.get("ln_entropy")
    view = synthetic_view(cls.requires, n=20)

    def key(params: dict) -> str:
        config = RunConfig(detectors=["ln_entropy"], evaluation={"bootstrap": 0},
                           detector_params={"ln_entropy": params})
        return score_detector("ln_entropy", "response", ResponseScoring(config), CellStore(tmp_path), view,
                              split_of(view), "ev").key

    base = key({})
    assert key({"variant": "normalized"}) == base             # the default, spelled out: same key
    assert key({"variant": next(v for v in cls.variants if v != "normalized")}) != base
    old = cls.version
    try:
        cls.version = old + "-changed"
        assert key({}) != base
    finally:
        cls.version = old
