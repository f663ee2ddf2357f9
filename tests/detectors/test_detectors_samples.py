"""The sample-based detectors of issue 43 (Semantic Density, SelfCheckGPT-Prompt, the LLM-judge panel) against
values computed by hand, the semantic-entropy pitfall of repeated samples, and the shared NLI evidence: every
NLI detector of a run together asks the model each distinct pair once.

NLI is a lookup table (`TableNLI` of test_detectors_standard.py); the prompted detectors talk to the mock
OpenAI-compatible server (tests/mock_openai.py), so each reply is chosen by the test and every request counted."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from test_detectors_standard import install_table_nli, scores, view

from haldet.detectors._consistency import with_question
from haldet.detectors.semantic_entropy import cluster_entropy
from haldet.models.pairs import cache as pair_cache
from haldet.signals import Signal
from mock_openai import FakeOpenAI, text_content


@pytest.fixture
def nli(monkeypatch):  # type: ignore[no-untyped-def]
    """`install_table_nli` bound to this test's monkeypatch (the fixture of test_detectors_standard.py)."""
    return lambda table: install_table_nli(monkeypatch, table)


A, B, C = "Q? paris", "Q? lyon", "Q? nice"
E, N, X = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]


# ------------------------------------------------------------------------------------------- semantic density
def test_semantic_density_by_hand(nli) -> None:  # type: ignore[no-untyped-def]
    """Distinct samples lyon (twice: counted once, its first draw's likelihood) and nice; weights exp(ll / T)."""
    nli({(A, B): [0.6, 0.3, 0.1], (A, C): [0.1, 0.2, 0.7]})
    v = view(["paris"], {Signal.SAMPLES: [["lyon", "nice", "lyon", ""]],
                         Signal.SAMPLE_LOGLIKS: [np.array([[-2.0, 2], [-3.0, 1], [-9.0, 9], [0.0, 1]])]})
    w = np.array([math.exp(-1.0), math.exp(-3.0)])
    kernel = np.array([1 - 0.1 - 0.3 / 2, 1 - 0.7 - 0.2 / 2])
    value = scores("semantic_density", v, nli_model="table", fallback=None)[0][0]
    assert value == pytest.approx(1 - (w * kernel).sum() / w.sum(), abs=1e-12)
    raw = scores("semantic_density", v, nli_model="table", fallback=None, length_normalize=False)[0][0]
    w = np.array([math.exp(-2.0), math.exp(-3.0)])
    assert raw == pytest.approx(1 - (w * kernel).sum() / w.sum(), abs=1e-12)


def test_semantic_density_edge_cases(nli) -> None:  # type: ignore[no-untyped-def]
    model = nli({})
    lls = np.array([[-1.0, 1], [-1.0, 1]])
    v = view(["paris", "", "paris", "paris"],
             {Signal.SAMPLES: [["paris", "paris"], ["lyon", "nice"], ["paris", "paris"], [""]],
              Signal.SAMPLE_LOGLIKS: [lls, lls, None, np.zeros((1, 2))]})
    values, reasons = scores("semantic_density", v, nli_model="table", fallback=None)
    assert values[0] == 0.0 and model.seen == []  # samples identical to the answer: density 1, no model call
    assert np.isnan(values[1]) and reasons[1] == "empty response"
    assert np.isnan(values[2]) and "log-likelihoods" in reasons[2]
    assert np.isnan(values[3]) and reasons[3] == "all samples are empty"


# ------------------------------------------------------------------------- semantic entropy: repeated samples
def test_semantic_entropy_class_probabilities_never_exceed_one_with_repeated_samples(nli) -> None:  # type: ignore[no-untyped-def]
    """lm-polygraph's reported bug: with repeated samples a class mass above 1 (a negative entropy). Here the
    classes carry the softmax of the K draws, so identical samples are one class of mass exactly 1."""
    model = nli({("Q? lyon", "Q? paris"): X, ("Q? paris", "Q? lyon"): X})
    lls = np.array([[-0.5, 1], [-0.5, 1], [-0.5, 1], [-2.0, 1]])
    v = view(["x", "x"], {Signal.SAMPLES: [["paris"] * 4, ["paris", "paris", "paris", "lyon"]],
                          Signal.SAMPLE_LOGLIKS: [lls, lls]})
    values, _ = scores("semantic_entropy", v, nli_model="table", fallback=None)
    assert values[0] == pytest.approx(0.0, abs=1e-9) and values[0] >= -1e-9
    p = np.exp([-0.5, -0.5, -0.5, -2.0])
    p /= p.sum()
    mass = np.array([p[:3].sum(), p[3]])
    assert values[1] == pytest.approx(float(-(mass * np.log(mass + 1e-10)).sum()), abs=1e-12)
    assert len(model.seen) == 2  # the identical pairs are never asked
    assert cluster_entropy([0, 0, 0], np.full(3, 1 / 3)) == pytest.approx(0.0, abs=1e-9)


# -------------------------------------------------------------------------------------- the prompted detectors
def _by_model_and_turn(body: dict[str, Any]) -> str:
    return f"{body['model']}|{body['messages'][-1]['content']}"


def test_selfcheck_prompt_maps_yes_no_other_by_hand() -> None:
    """Two sentences x three samples; replies Yes (0), No (1), anything else (0.5), each pair asked once."""
    answer = "Paris is in France. It has a tower."
    samples = ["Paris is a French city.", "Paris is in Spain.", "I do not know."]
    replies = {("Paris is a French city.", "Paris is in France."): "Yes.",
               ("Paris is in Spain.", "Paris is in France."): "No, it does not.",
               ("I do not know.", "Paris is in France."): "Maybe",
               ("Paris is a French city.", "It has a tower."): "not mentioned",
               ("Paris is in Spain.", "It has a tower."): "yes",
               ("I do not know.", "It has a tower."): "No"}

    def key_of(body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        passage = text.split("Passage: ", 1)[1].split("\n\nSentence: ", 1)[0]
        sentence = text.split("\n\nSentence: ", 1)[1].split("\n\n", 1)[0]
        return f"{passage}|{sentence}"

    with FakeOpenAI(content=text_content, key_of=key_of, default="ok:??") as srv:
        for (passage, sentence), reply in replies.items():
            srv.plans[f"{passage}|{sentence}"] = [f"ok:{reply}"]
        v = view([answer, ""], {Signal.SAMPLES: [samples, samples]})
        params = {"model": f"checker-{id(srv)}", "base_url": srv.base_url, "api_key_env": "NO_KEY_NEEDED",
                  "retries": 0}
        values, reasons = scores("selfcheck_prompt", v, **params)
        assert sum(srv.calls.values()) == 6
        # the paper's mapping, sentence x sample ("not mentioned" starts with "no": a No, as in the source)
        x = np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 1.0]])
        assert values[0] == pytest.approx(x.mean(axis=1).mean())
        assert np.isnan(values[1]) and reasons[1] == "empty response"
        scores("selfcheck_prompt", v, **params)
        assert sum(srv.calls.values()) == 6  # asked again: every pair answered from the pair cache


def test_llm_panel_two_judges_disagreeing_by_hand() -> None:
    """Judge a says CORRECT on both items, judge b INCORRECT on the first and no grade on the second."""
    q1, q2 = "Question: Capital of France?", "Question: Capital of Peru?"
    with FakeOpenAI(content=text_content, key_of=_by_model_and_turn, default="ok:CORRECT") as srv:
        suffix = id(srv)
        for (model, q), reply in {(f"a{suffix}", q1): "CORRECT", (f"a{suffix}", q2): "Correct.",
                                  (f"b{suffix}", q1): "It is INCORRECT", (f"b{suffix}", q2): "no idea"}.items():
            srv.plans[f"{model}|{q}\n\nProposed answer: {'Lyon' if 'France' in q else 'Lima'}\n\n"
                      "Grade the proposed answer. Reply with exactly one word: CORRECT if it is right, INCORRECT "
                      "if it is wrong, UNSURE if you cannot tell."] = [f"ok:{reply}"]
        inst_view = view(["Lyon", "Lima"], {})
        inst_view.instances[0].question, inst_view.instances[1].question = "Capital of France?", "Capital of Peru?"
        judges = [f"a{suffix}", f"b{suffix}"]
        common = {"judges": judges, "base_url": srv.base_url, "api_key_env": "NO_KEY_NEEDED", "retries": 0}
        mean, _ = scores("llm_panel", inst_view, variant="mean", **common)
        assert mean[0] == pytest.approx((0.0 + 1.0) / 2) and mean[1] == pytest.approx(0.0)  # b abstains on item 2
        vote, _ = scores("llm_panel", inst_view, variant="vote", **common)
        assert vote[0] == 0.5 and vote[1] == 0.0  # a tie; one vote CORRECT
        assert srv.calls and sum(srv.calls.values()) == 4 + 1  # b's ungraded item is asked again, nothing else
        lone, reasons = scores("llm_panel", inst_view, judges=[f"b{suffix}"], base_url=srv.base_url,
                               api_key_env="NO_KEY_NEEDED", retries=0)
        assert lone[0] == 1.0 and np.isnan(lone[1]) and "no CORRECT / INCORRECT / UNSURE grade" in reasons[1]


def test_llm_panel_rejects_a_judge_without_a_model() -> None:
    from haldet.detectors.base import DETECTORS

    with pytest.raises(ValueError, match="no `model`"):
        DETECTORS.get("llm_panel")(judges=[{"base_url": "http://x"}])
    with pytest.raises(ValueError, match="names no judge"):
        DETECTORS.get("llm_panel")(judges=[])


# ------------------------------------------------------------------------------ the shared NLI evidence of a run
def test_every_nli_detector_of_a_run_asks_each_pair_once(nli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Semantic entropy, SelfCheck-NLI, the NLI graph methods, KLE and Semantic Density scored on one cell: the
    model sees each distinct pair once; a second process (the pair memory cleared) reads them from the cell's
    pairs/ log and asks nothing."""
    texts = ["paris", "lyon", "paris is it"]
    q = [with_question(" Q? ", t) for t in texts]  # "Q?  paris": blanks around the question, stripped once
    table = {(a, b): ([0.7, 0.2, 0.1] if a.split()[-1][:3] == b.split()[-1][:3] else [0.1, 0.2, 0.7])
             for a in q + texts for b in q + texts}
    model = nli(table)
    v = view(["paris"], {Signal.SAMPLES: [texts], Signal.SAMPLE_LOGLIKS: [np.array([[-1.0, 1]] * 3)]})
    v.instances[0].question = " Q? "  # blanks around the question: every detector builds the same stripped text
    detectors: list[tuple[str, dict[str, Any]]] = [
        ("semantic_entropy", {}), ("selfcheck_nli", {}), ("semantic_density", {}), ("kle", {"include_question": True}),
        *[(name, {"variant": "nli_entail", "include_question": True}) for name in ("eigv", "ecc", "deg")],
        ("num_sem_sets", {"variant": "nli", "include_question": True})]
    from haldet.detectors.base import DETECTORS

    def run() -> list[float]:
        out = []
        for name, params in detectors:
            det = DETECTORS.get(name)(nli_model="table", fallback=None, **params)
            det.workdir = tmp_path
            out.append(float(det.score(v).values[0]))
        return out

    first = run()
    assert len(model.seen) == len(set(model.seen)) > 0  # each distinct pair once across all detectors
    asked = len(model.seen)
    pair_cache._MEMORY.clear()
    from haldet.detectors import _relations

    _relations.clear_memory()
    assert run() == first and len(model.seen) == asked  # from the cell's pairs/ log: no new call
