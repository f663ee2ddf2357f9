"""Black/gray-box detectors on synthetic signals: hand-computed values, invalid inputs (NaN + reason).

Pair models (NLI, BERTScore, similarity) are replaced by lookup tables here so the aggregation formulas can be
checked exactly; the real backends are tested in test_detectors_blackbox_models.py.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import numpy as np
import pytest
from test_detectors_standard import view

from haldet.detectors import _consistency
from haldet.detectors.base import DETECTORS
from haldet.detectors.sar import sentence_sar, token_sar
from haldet.detectors.self_eval import parse_verdict
from haldet.detectors.selfcheck_nli import expand_option
from haldet.detectors.semantic_entropy import cluster_ids
from haldet.models.pairs.base import PairModel
from haldet.signals import Signal, SignalView


def make_view(responses: list[str], signals: dict[Signal, list[Any]], *, question: str = "Q?",
              options: dict[str, str] | None = None, logprobs: list[list[float]] | None = None) -> SignalView:
    return view(responses, signals, logprobs, question=question, options=options)


class TablePairs(PairModel):
    """Pair values from a dict (a stand-in for a model, so formulas can be checked by hand)."""

    def __init__(self, kind: str, width: int, table: dict[tuple[str, str], list[float]]) -> None:
        self.kind, self.width = kind, width
        super().__init__("table", batch_size=4)
        self.id = f"table:{uuid.uuid4().hex}"  # a fresh id: the process-wide pair memory is keyed by model id
        self.table = table
        self.seen: list[tuple[str, str]] = []

    def compute(self, pairs):  # type: ignore[no-untyped-def]
        self.seen += list(pairs)
        return np.array([self.table[p] for p in pairs], dtype=np.float64)


@pytest.fixture
def use_table(monkeypatch):
    def install(kind: str, width: int, table: dict[tuple[str, str], list[float]]) -> TablePairs:
        model = TablePairs(kind, width, table)
        monkeypatch.setattr(_consistency, "load_pair_model",
                            lambda kind, name, fallback=None, **kw: (model, {"requested": name, "used": model.id}))
        return model
    return install


def detector(name: str, **params: Any):  # type: ignore[no-untyped-def]
    return DETECTORS.get(name)(**params)


def nan_reasons(scores, idx):  # type: ignore[no-untyped-def]
    return [(bool(np.isnan(scores.values[i])), scores.reasons[i]) for i in idx]


# ------------------------------------------------------------------------------------------------ verbalized
def test_verbalized_values_and_invalid() -> None:
    view = make_view(["a"] * 4, {Signal.VERBALIZED: ["Confidence: 0.8", "I am 30% sure", "no idea", None]})
    out = detector("verbalized").score(view)
    assert out.values[:2] == pytest.approx([0.2, 0.7])
    assert np.isnan(out.values[2]) and "no confidence" in out.reasons[2]
    assert np.isnan(out.values[3]) and out.reasons[3]
    paper_det = detector("verbalized", variant="paper")
    paper = paper_det.score(view)
    assert paper.values[2] == 0.5 and np.isnan(paper.values[3])
    assert paper_det.meta["unparsable"] == 1 and "coverage would be 75%" in paper_det.meta["note"]


# ------------------------------------------------------------------------------------------------ self_eval
def test_self_eval_probability_first_then_text() -> None:
    se = [{"p_true": 0.9, "text": "Incorrect"}, {"p_true": None, "text": "The answer is Correct"},
          {"p_true": None, "text": "Incorrect."}, {"p_true": None, "text": "hmm"}, None,
          {"p_true": 1.3, "text": ""}, {"p_true": float("nan"), "text": "Correct"}]
    out = detector("self_eval").score(make_view(["a"] * len(se), {Signal.SELF_EVAL: se}))
    assert out.values[0] == pytest.approx(0.1)       # the probability wins over the text
    assert out.values[1] == 0.0 and out.values[2] == 1.0
    assert out.values[5] == 0.0                      # clipped to [0, 1]
    assert all(nan for nan, reason in nan_reasons(out, [3, 4, 6]) if reason)
    no_text = detector("self_eval", text_fallback=False).score(make_view(["a"], {Signal.SELF_EVAL: [se[1]]}))
    assert np.isnan(no_text.values[0])


def test_self_eval_raw_variant_uses_the_raw_true_probability() -> None:
    """Paper E.3: 1 - P(True) with P(True) the raw token mass (0.2 here), not True/(True+False) (0.8)."""
    se = [{"p_true": 0.8, "logp_true": math.log(0.2), "text": "Correct"},
          {"p_true": None, "logp_true": None, "text": "Incorrect"}]
    view = make_view(["a", "b"], {Signal.SELF_EVAL: se})
    assert detector("self_eval").score(view).values[0] == pytest.approx(0.2)
    raw = detector("self_eval", variant="raw").score(view).values
    assert raw[0] == pytest.approx(0.8) and raw[1] == 1.0   # no probability: the verdict text


def test_parse_verdict_last_word_wins() -> None:
    assert parse_verdict("It is not correct") is False
    assert parse_verdict("At first I thought it was wrong, but it is correct") is True
    assert parse_verdict("The proposed answer is incorrect.") is False
    assert parse_verdict("") is None


# ------------------------------------------------------------------------------------------------ lexical
def test_lexical_similarity_rouge_l() -> None:
    samples = [["the cat sat", "the cat sat", "a dog ran"], ["the cat sat on the mat", "the cat sat", ""],
               None, ["only one", ""]]
    out = detector("lexical_similarity").score(make_view(["a"] * 4, {Signal.SAMPLES: samples}))
    assert out.values[0] == pytest.approx(1 - 1 / 3)   # pairs: 1, 0, 0
    assert out.values[1] == pytest.approx(1 - 2 / 3)   # LCS 3 of 6 and 3 tokens: F1 = 2/3; empty dropped
    assert np.isnan(out.values[2]) and np.isnan(out.values[3]) and "need 2" in out.reasons[3]


def test_lexical_similarity_tokenizes_each_sample_once(monkeypatch) -> None:
    """Each sample is in K - 1 pairs: it is tokenized (and stemmed) once, and the scores are rouge-score's own."""
    from itertools import combinations

    from rouge_score import rouge_scorer, tokenize

    samples = [["The cats were running home", "the cat ran home quickly", "cats running", "a dog barked"],
               ["Paris is the capital", "the capital is Paris", "Lyon"]]
    reference = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    expected = [1 - np.mean([reference.score(a, b)["rougeL"].fmeasure for a, b in combinations(ss, 2)])
                for ss in samples]
    seen: list[str] = []
    real = tokenize.tokenize

    def counting(text, stemmer):  # type: ignore[no-untyped-def]
        seen.append(text)
        return real(text, stemmer)

    monkeypatch.setattr(tokenize, "tokenize", counting)
    out = detector("lexical_similarity").score(make_view(["a"] * 2, {Signal.SAMPLES: samples}))
    assert out.values.tolist() == expected
    assert sorted(seen) == sorted(s for ss in samples for s in ss)


# ------------------------------------------------------------------------------------------------ ln_entropy
def test_ln_entropy_normalized_and_paper() -> None:
    ll = [np.array([[-2.0, 4], [-3.0, 3], [0.0, 0]]), None, np.array([[0.0, 0]]), np.array([[np.nan, 2], [-1, 2]])]
    view = make_view(["a"] * 4, {Signal.SAMPLE_LOGLIKS: ll})
    out = detector("ln_entropy").score(view)
    assert out.values[0] == pytest.approx((0.5 + 1.0) / 2)
    assert out.values[3] == pytest.approx(0.5)
    assert np.isnan(out.values[1]) and np.isnan(out.values[2]) and out.reasons[2]
    paper = detector("ln_entropy", variant="paper").score(view)
    assert paper.values[0] == pytest.approx(2.5)


def test_perplexity_cap_e14() -> None:
    view = make_view(["a b", "c d"], {}, logprobs=[[-1.0, -3.0], [-60.0, -60.0]])
    out = detector("perplexity").score(view)
    assert out.values[0] == pytest.approx(math.exp(2.0)) and out.values[1] == 1e10


# ------------------------------------------------------------------------------------------------ selfcheck_nli
NLI_TABLE = {
    ("k one", "Paris is big."): [0.7, 0.2, 0.1], ("k two", "Paris is big."): [0.5, 0.2, 0.3],
    ("k one", "Rome is old."): [0.1, 0.1, 0.8], ("k two", "Rome is old."): [0.2, 0.4, 0.4],
}


def test_selfcheck_nli_both_aggregates(use_table) -> None:
    use_table("nli", 3, NLI_TABLE)
    samples = [["k one", "k two", ""], None, []]
    view = make_view(["Paris is big. Rome is old.", "x", "y"], {Signal.SAMPLES: samples})
    paper = detector("selfcheck_nli", variant="paper").score(view)
    assert paper.values[0] == pytest.approx(max((0.1 + 0.3) / 2, (0.8 + 0.4) / 2))
    orig = detector("selfcheck_nli").score(view)
    s1 = (0.1 / 0.8 + 0.3 / 0.8) / 2
    s2 = (0.8 / 0.9 + 0.4 / 0.6) / 2
    assert orig.values[0] == pytest.approx((s1 + s2) / 2)
    assert np.isnan(orig.values[1]) and orig.reasons[1] == "no samples"
    assert np.isnan(orig.values[2]) and "empty" in orig.reasons[2]


def test_selfcheck_nli_expands_mcq_letters(use_table) -> None:
    model = use_table("nli", 3, {("Paris", "Rome"): [0.0, 0.0, 1.0], ("Rome", "Rome"): [1.0, 0.0, 0.0]})
    view = make_view(["B"], {Signal.SAMPLES: [["A", "(b)"]]}, options={"A": "Paris", "B": "Rome"})
    out = detector("selfcheck_nli", variant="paper").score(view)
    assert set(model.seen) == {("Paris", "Rome"), ("Rome", "Rome")}
    assert out.values[0] == pytest.approx(0.5)
    assert expand_option("Answer: C.", {"c": "Lyon"}) == "Lyon"
    assert expand_option("B is my guess", {"B": "Rome"}) == "B is my guess"


# ------------------------------------------------------------------------------------------------ bertscore
def test_selfcheck_bertscore_max_then_mean(use_table) -> None:
    f1 = {("Alpha one.", "Alpha one."): 1.0, ("Alpha one.", "Gamma three."): 0.2, ("Alpha one.", "Delta four."): 0.3,
          ("Beta two.", "Alpha one."): 0.1, ("Beta two.", "Gamma three."): 0.4, ("Beta two.", "Delta four."): 0.6}
    use_table("bertscore", 3, {k: [0.0, 0.0, v] for k, v in f1.items()})
    view = make_view(["Alpha one. Beta two.", ""], {Signal.SAMPLES: [["Alpha one. Gamma three.", "Delta four."],
                                                                     ["z"]]})
    out = detector("selfcheck_bertscore").score(view)
    assert out.values[0] == pytest.approx(((1 - 0.65) + (1 - 0.5)) / 2)
    assert np.isnan(out.values[1]) and out.reasons[1] == "empty response"


# ------------------------------------------------------------------------------------------------ semantic entropy
E, N, C = [0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9]


def _se_table(back: list[float]) -> dict[tuple[str, str], list[float]]:
    t = {("Q? Paris", "Q? Paris city"): E, ("Q? Paris city", "Q? Paris"): back}
    for a in ("Q? Paris", "Q? Paris city"):
        t[(a, "Q? Rome")] = C
        t[("Q? Rome", a)] = C
    return t


def test_semantic_entropy_clusters_and_weights(use_table) -> None:
    use_table("nli", 3, _se_table(E))
    samples = [["Paris", "Paris city", "Rome", ""], ["Paris", "Paris city", "Rome"], ["Paris"], None]
    ll = [np.array([[-1.0, 1], [-2.0, 2], [-1.0, 1], [0.0, 0]]), np.array([[np.nan, 1], [-2.0, 2], [-1.0, 1]]),
          np.array([[-1.0, 1]]), None]
    out = detector("semantic_entropy").score(make_view(["a"] * 4, {Signal.SAMPLES: samples,
                                                                   Signal.SAMPLE_LOGLIKS: ll}))
    w = np.exp([-1.0, -2.0, -1.0])
    w /= w.sum()
    p = np.array([w[0] + w[1], w[2]])
    assert out.values[0] == pytest.approx(-(p * np.log(p + 1e-10)).sum())
    pu = np.array([2 / 3, 1 / 3])  # a NaN log-likelihood: uniform weights
    assert out.values[1] == pytest.approx(-(pu * np.log(pu + 1e-10)).sum())
    assert np.isnan(out.values[2]) and "need 2" in out.reasons[2]
    assert np.isnan(out.values[3])


def test_semantic_entropy_strict_vs_loose(use_table) -> None:
    use_table("nli", 3, _se_table(N))   # entailment one way, neutral back
    view = make_view(["a"], {Signal.SAMPLES: [["Paris", "Paris city", "Rome"]],
                             Signal.SAMPLE_LOGLIKS: [np.array([[-1.0, 1], [-1.0, 1], [-1.0, 1]])]})
    strict = detector("semantic_entropy").score(view)
    loose = detector("semantic_entropy", equivalence="loose").score(view)
    assert strict.values[0] == pytest.approx(math.log(3), abs=1e-8)
    p = np.array([2 / 3, 1 / 3])
    assert loose.values[0] == pytest.approx(-(p * np.log(p + 1e-10)).sum())


def test_cluster_ids_greedy() -> None:
    same = {(0, 2), (1, 3)}
    assert cluster_ids(4, lambda i, j: (i, j) in same) == [0, 1, 0, 1]


# ------------------------------------------------------------------------------------------------ SAR
def test_sentence_sar_formula(use_table) -> None:
    use_table("similarity", 1, {("Q? a", "Q? b"): [0.5], ("Q? b", "Q? a"): [0.4]})
    ll = [np.array([[-1.0, 1], [-2.0, 2], [np.nan, 1]]), np.array([[-1.0, 1], [0.0, 0]])]
    view = make_view(["x", "y"], {Signal.SAMPLES: [["a", "b", "c"], ["a", ""]], Signal.SAMPLE_LOGLIKS: ll})
    out = detector("sar").score(view)
    es1 = -math.log(math.exp(-1) + 1000 * 0.5 * math.exp(-2))
    es2 = -math.log(math.exp(-2) + 1000 * 0.4 * math.exp(-1))
    assert out.values[0] == pytest.approx((es1 + es2) / 2)
    assert np.isnan(out.values[1]) and "need 2" in out.reasons[1]


def test_sentence_sar_stable_for_tiny_probabilities() -> None:
    # log-likelihoods of -2000 underflow exp(); the log-sum-exp form stays finite and exact
    value = sentence_sar(np.array([-2000.0, -2001.0]), np.array([[0, 1.0], [1.0, 0]]), 0.001)
    expected = np.mean([2000 - math.log(1 + 1000 * math.exp(-1)), 2001 - math.log(1 + 1000 * math.exp(1))])
    assert value == pytest.approx(expected)


def test_token_sar_weights() -> None:
    assert token_sar(np.array([-1.0, -2.0]), np.array([0.5, 1.5])) == pytest.approx(1.75)
    assert token_sar(np.array([-1.0, -3.0]), np.zeros(2)) == pytest.approx(2.0)


# ------------------------------------------------------------------------------------------------ registry
def test_registry_lists_the_nine() -> None:
    names = {n for n, _ in DETECTORS}
    assert {"verbalized", "self_eval", "selfcheck_bertscore", "selfcheck_nli", "lexical_similarity", "perplexity",
            "ln_entropy", "sar", "semantic_entropy", "token_sar"} <= names
    fam = {n: str(DETECTORS.get(n).family()) for n in ("verbalized", "selfcheck_nli", "ln_entropy", "sar")}
    assert fam["verbalized"] == "black" and fam["selfcheck_nli"] == "black" and fam["ln_entropy"] == "gray"
    assert DETECTORS.get("selfcheck_nli").variants.keys() == {"selfcheckgpt", "paper"}
    with pytest.raises(ValueError):
        detector("ln_entropy", variant="nope")


def test_cli_detectors_list_json() -> None:
    import json

    from typer.testing import CliRunner

    from haldet.cli import app

    res = CliRunner().invoke(app, ["detectors", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert {"name", "family", "requires", "trains", "variants"} <= set(rows["semantic_entropy"])
    assert rows["selfcheck_nli"]["variants"] == ["paper", "selfcheckgpt"]
    assert rows["sar"]["requires"] == ["sample_logliks", "samples"] and rows["sar"]["trains"] is False
    assert rows["minicheck"]["levels"] == ["response", "sentence", "claim", "span"]
    assert rows["minicheck"]["needs"] == ["support (checker=llm:bespokelabs/Bespoke-MiniCheck-7B)"]
    assert rows["lynx"]["needs"] == ["verdict prompt verigray_lynx"] and rows["likelihood"]["needs"] == []
    # the judges build their ask from their parameters: the default one is named
    assert rows["llm_judge_po"]["needs"] == ["verdict prompt faithfulness@3shot+po"]
    wide = CliRunner().invoke(app, ["detectors", "list"], terminal_width=60)
    assert "lexical_similarity" in wide.output


def test_token_sar_detector_weights_relevant_tokens(monkeypatch) -> None:
    from haldet.backends.hf.backend import HFBackend

    tok = HFBackend("smollm2-135m").tokenizer
    ids = tok("Paris is nice", add_special_tokens=False).input_ids
    lps = [-0.5 * (t + 1) for t in range(len(ids))]

    class Sim(TablePairs):
        def compute(self, pairs):  # type: ignore[no-untyped-def]
            # dropping "Paris" changes the meaning (low similarity: relevant); other tokens barely matter
            return np.array([[0.9 if "Paris" in b else 0.2] for _, b in pairs])

    model = Sim("similarity", 1, {})
    monkeypatch.setattr(_consistency, "load_pair_model", lambda kind, name, fallback=None, **kw: (model, {}))
    view = make_view(["Paris is nice"], {}, logprobs=[lps])
    view.generations[0] = view.generations[0].model_copy(update={"token_ids": ids})
    out = detector("token_sar", tokenizer="smollm2-135m").score(view)
    relevance = np.array([0.8 if "Paris" in tok.decode([i]) else 0.1 for i in ids])
    assert out.values[0] == pytest.approx(token_sar(np.array(lps), relevance))
