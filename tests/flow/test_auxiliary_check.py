"""A detector whose auxiliary model is found neither as requested nor as its fallback fails the run before any
work (not when it is scored after the decoding), with what, where and what to do; a model whose fallback is here
passes, and so does a detector that gives NaN with the reason without its model (CCP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import haldet
import haldet.models.provenance as provenance
from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.flow.run import check_auxiliary_models
from haldet.flow.scoring import make_detector

CROSS_ENCODER = "cross-encoder/stsb-distilroberta-base"  # SAR's similarity model; its offline fallback is MiniLM


def nowhere(monkeypatch: Any, *names: str) -> None:
    """`locate` finds none of `names` (as on a machine without the hub, the cache or the packaged copy)."""
    real = provenance.locate
    monkeypatch.setattr(provenance, "locate", lambda name: None if name in names else real(name))


def test_a_model_nowhere_fails_the_run_before_any_work(tmp_path: Path, monkeypatch: Any) -> None:
    nowhere(monkeypatch, CROSS_ENCODER, "minilm")
    config = RunConfig.model_validate({"limit": 2, "detectors": ["perplexity", "sar"]})
    with pytest.raises(HaldetError) as raised:
        haldet.run(config, tmp_path / "run")
    error = raised.value
    assert "'sar'" in error.what and CROSS_ENCODER in error.what and "fallback" in error.what
    assert error.where == "detector_params.sar.similarity_model" and "leave sar out" in error.hint
    assert not (tmp_path / "run").exists()  # refused before the run directory was made: nothing decoded


def test_a_model_whose_fallback_is_here_passes(monkeypatch: Any) -> None:
    config = RunConfig.model_validate({"detectors": ["perplexity", "sar"]})
    nowhere(monkeypatch, CROSS_ENCODER)  # the requested model is missing, the packaged MiniLM is here
    check_auxiliary_models(config)
    assert provenance.missing_auxiliary(make_detector("sar", config)) == []
    nowhere(monkeypatch, CROSS_ENCODER, "minilm")
    assert provenance.missing_auxiliary(make_detector("sar", config)) == [("similarity_model", CROSS_ENCODER)]


def test_a_detector_that_answers_nan_without_its_model_is_left_to_do_so(monkeypatch: Any) -> None:
    config = RunConfig.model_validate({"detectors": ["ccp"]})
    nowhere(monkeypatch, "microsoft/deberta-base-mnli")  # CCP's NLI model, no fallback
    assert provenance.missing_auxiliary(make_detector("ccp", config)) == [("nli_model", "microsoft/deberta-base-mnli")]
    check_auxiliary_models(config)  # its items will be NaN, each saying no NLI model could run
