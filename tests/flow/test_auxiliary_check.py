"""A detector whose auxiliary model is found neither as requested nor as its fallback fails the run before any
work (not when it is scored after the decoding), with what, where and what to do; a model whose fallback is here
passes, and so does a detector that gives NaN with the reason without its model (CCP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import haldet
import haldet.models.provenance as provenance
from haldet.config import JudgeConfig, RunConfig
from haldet.errors import HaldetError
from haldet.flow.run import check_auxiliary_models, check_judge_models
from haldet.flow.scoring import make_detector
from haldet.judges.cascade import Cascade

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


def test_a_judge_model_nowhere_fails_the_run_before_any_work(tmp_path: Path, monkeypatch: Any) -> None:
    """The similarity judge labels HaluEval-QA's short answers with the embedded MiniLM: without it the run is
    refused before the decoding, not after it when the first answer is labelled."""
    nowhere(monkeypatch, "minilm")
    config = RunConfig.model_validate({"limit": 2, "detectors": ["perplexity"]})
    with pytest.raises(HaldetError) as raised:
        haldet.run(config, tmp_path / "run")
    error = raised.value
    assert "'rule:reference_similarity'" in error.what and "'minilm'" in error.what and error.where == "judge"
    assert "make setup" in error.hint and "--judge" in error.hint
    assert not (tmp_path / "run").exists()


def test_a_judge_model_is_asked_for_only_where_the_judge_applies(monkeypatch: Any) -> None:
    nowhere(monkeypatch, "minilm")
    judges = Cascade.from_config(JudgeConfig())
    check_judge_models(judges, frozenset({"code", "math"}))  # the similarity judge labels no code or math answers
    with pytest.raises(HaldetError, match="minilm"):
        check_judge_models(judges, frozenset({"code", ""}))  # "": rows that name their own task type
    check_judge_models(Cascade.from_config(JudgeConfig(kind="exec")), frozenset({"qa"}))  # no similarity judge


def test_a_local_llm_judge_nowhere_fails_before_any_work(monkeypatch: Any) -> None:
    monkeypatch.setattr(provenance, "hub_reachable", lambda: False)
    judges = Cascade.from_config(JudgeConfig(kind="llm", backend="hf", model="no-such-org/no-such-judge"))
    with pytest.raises(HaldetError, match="'llm:no-such-org/no-such-judge' needs the model"):
        check_judge_models(judges, frozenset({"summarization"}))
    check_judge_models(Cascade.from_config(JudgeConfig(kind="llm", backend="hf", model="smollm2-135m")),
                       frozenset({"summarization"}))  # the embedded model is here
    check_judge_models(Cascade.from_config(JudgeConfig(kind="llm", model="gpt-4o-mini")),
                       frozenset({"summarization"}))  # an endpoint: nothing local to find
