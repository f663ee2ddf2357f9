"""The standard baselines of the uncertainty literature (MSP, minimum token probability, top-1/top-2 margin, the
graph-spectral family, SelfCheckGPT n-gram, CoCoA, Mahalanobis): each formula against values computed by hand on
small inputs, and the edge cases (one sample, identical samples, ties, an empty answer: NaN with a reason).

NLI is a lookup table here (as in test_detectors_blackbox.py), so graph weights are known exactly and every model
call is counted."""

from __future__ import annotations

import math
import uuid
from typing import Any

import numpy as np
import pytest

from haldet.detectors import _consistency, _relations
from haldet.detectors._graph import degree, eccentricity, eigv, laplacian
from haldet.detectors.base import DETECTORS
from haldet.models.pairs.base import PairModel
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView


def view(responses: list[str], signals: dict[Signal, list[Any]], logprobs: list[list[float]] | None = None,
         labels: list[int] | None = None, *, question: str = "Q?",
         options: dict[str, str] | None = None) -> SignalView:
    """Items t/test/0.. answering `question` with `responses`; `signals` holds each signal's value per item."""
    n = len(responses)
    ids = [f"t/test/{i}" for i in range(n)]
    instances = [Instance(id=ids[i], dataset="t", scenario="qa_open", task_type="short_answer", question=question,
                          options=options or {}) for i in range(n)]
    lps = logprobs or [[-0.1] * max(1, len(r.split())) for r in responses]
    gens = [Generation(id=ids[i], prompt="p", response=responses[i], token_ids=list(range(len(lps[i]))),
                       token_logprobs=lps[i], finish_reason="stop", n_tokens=len(lps[i]), model="m")
            for i in range(n)]

    def loader(signal: Signal, wanted: Any) -> list[Any]:
        return [signals[signal][int(i.rsplit("/", 1)[1])] for i in wanted]

    return SignalView(ids=ids, instances=instances, generations=gens, loader=loader,
                      labels=None if labels is None else np.asarray(labels))


def install_table_nli(monkeypatch: pytest.MonkeyPatch, table: dict[tuple[str, str], list[float]]) -> TableNLI:
    """A `TableNLI` installed as every detector's NLI model; returned (its `seen` lists the pairs asked)."""
    model = TableNLI(table)
    monkeypatch.setattr(_consistency, "load_pair_model",
                        lambda kind, name, fallback=None, **kw: (model, {"requested": name, "used": model.id}))
    return model


@pytest.fixture
def nli(monkeypatch):  # type: ignore[no-untyped-def]
    """`install_table_nli` bound to this test's monkeypatch."""
    return lambda table: install_table_nli(monkeypatch, table)


def scores(name: str, v: SignalView, **params: Any) -> tuple[np.ndarray, list[str]]:
    out = DETECTORS.get(name)(**params).score(v)
    return out.values, out.reasons


class TableNLI(PairModel):
    """NLI probabilities (entailment, neutral, contradiction) from a dict; counts the pairs it is asked."""

    kind, width = "nli", 3

    def __init__(self, table: dict[tuple[str, str], list[float]]) -> None:
        super().__init__("table", batch_size=4)
        self.id = f"table:{uuid.uuid4().hex}"
        self.table, self.seen = table, []  # type: ignore[var-annotated]

    def compute(self, pairs):  # type: ignore[no-untyped-def]
        self.seen += list(pairs)
        return np.array([self.table[p] for p in pairs], dtype=np.float64)




# ------------------------------------------------------------------------------------------------ gray-box
def test_msp_is_the_negative_sequence_log_probability() -> None:
    v = view(["a b c", "", "x"], {}, logprobs=[[-0.1, -0.2, -0.7], [], [-math.inf]])
    values, reasons = scores("msp", v)
    assert values[0] == pytest.approx(1.0)
    assert np.isnan(values[1]) and reasons[1] == "empty response"
    assert np.isnan(values[2]) and "non-finite" in reasons[2]


def test_min_token_probability() -> None:
    v = view(["a b", "c"], {}, logprobs=[[-0.1, math.log(0.25)], [0.0]])
    values, _ = scores("min_probability", v)
    assert values.tolist() == pytest.approx([0.75, 0.0])


def test_topk_margin_reads_the_two_largest_whatever_was_observed() -> None:
    log = np.log
    rows = [np.array([[log(0.5), log(0.3), log(0.1)],    # observed is top-1: margin 0.2
                      [log(0.2), log(0.6), log(0.1)]]),  # a sampled token: top-2 are 0.6 and 0.2, margin 0.4
            np.array([[log(0.4), log(0.4)]]),            # a tie: margin 0
            np.array([[log(0.9)]]),                      # top_k = 1: no alternative
            np.zeros((0, 3))]
    v = view(["a b", "c", "d", ""], {Signal.TOKEN_TOPK_LOGPROBS: rows})
    values, reasons = scores("topk_margin", v)
    assert values[:2].tolist() == pytest.approx([1 - 0.3, 1.0])
    assert np.isnan(values[2]) and "only the observed token" in reasons[2]
    assert np.isnan(values[3]) and reasons[3] == "empty response"


# ------------------------------------------------------------------------------------------------ graph family
def test_graph_measures_by_hand_on_a_three_response_jaccard_graph() -> None:
    # J("a b", "a c") = 1/3, "d" shares nothing: W = [[1, 1/3, 0], [1/3, 1, 0], [0, 0, 1]], degrees 4/3, 4/3, 1.
    # L's block of the first two is [[1/4, -1/4], [-1/4, 1/4]] (eigenvalues 0 and 1/2), the third node gives 0.
    W = np.array([[1, 1 / 3, 0], [1 / 3, 1, 0], [0, 0, 1.0]])
    assert np.linalg.eigvalsh(laplacian(W)) == pytest.approx([0, 0, 0.5], abs=1e-12)
    v = view(["r"], {Signal.SAMPLES: [["a b", "a c", "d"]]})
    assert scores("eigv", v)[0][0] == pytest.approx(1 + 1 + 0.5)  # sum max(0, 1 - lambda)
    assert scores("deg", v)[0][0] == pytest.approx((9 - 11 / 3) / 9)  # trace(3I - D) / 3^2 = 16/27
    # threshold 0.9 keeps all three eigenvectors (an orthogonal V): ||V - mean||_F^2 = 3 - 1 = 2
    assert scores("ecc", v)[0][0] == pytest.approx(math.sqrt(2))
    # threshold 0.4 keeps the two null vectors (1, 1, 0)/sqrt(2) and (0, 0, 1): deviations (s/6, -1/3) twice and
    # (-s/3, 2/3), s = sqrt(2): squared norm 2 (1/18 + 1/9) + 2/9 + 4/9 = 1
    assert scores("ecc", v, threshold=0.4)[0][0] == pytest.approx(1.0)
    assert scores("num_sem_sets", v)[0][0] == 3  # no pair reaches Jaccard 0.5
    assert scores("num_sem_sets", v, jaccard_threshold=0.3)[0][0] == 2
    assert eigv(W) == pytest.approx(2.5) and degree(W) == pytest.approx(16 / 27)


def test_eigv_clips_eigenvalues_above_one() -> None:
    # a path graph with unit weights: D = diag(2, 3, 2); D^-1/2 W D^-1/2 has eigenvalues 1/2 (on (1, 0, -1)) and
    # 1, -1/6 (on the symmetric vectors: trace 5/6, determinant -1/6), so L has 0, 1/2, 7/6: the 7/6 adds nothing
    W = np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1.0]])
    assert np.linalg.eigvalsh(laplacian(W)) == pytest.approx([0, 0.5, 7 / 6])
    assert eigv(W) == pytest.approx(1 + 0.5)


def test_graph_measures_on_identical_one_and_empty_samples() -> None:
    v = view(["r", "r", "r", "r"], {Signal.SAMPLES: [["x y"] * 4, ["x y", "", "  "], None, ["a", "A"]]})
    for name, same in (("eigv", 1.0), ("deg", 0.0), ("ecc", 0.0), ("num_sem_sets", 1.0)):
        values, reasons = scores(name, v)
        assert values[0] == pytest.approx(same, abs=1e-9), name   # m identical samples: one meaning
        assert np.isnan(values[1]) and reasons[1] == "1 non-empty sample(s); need 2", name
        assert np.isnan(values[2]) and reasons[2] == "no samples", name
        assert values[3] == pytest.approx(same, abs=1e-9), name   # Jaccard lower-cases
    assert eccentricity(np.ones((3, 3))) == pytest.approx(0.0, abs=1e-12)


def test_graph_measures_with_nli_weights_and_the_pairs_asked_once(nli) -> None:  # type: ignore[no-untyped-def]
    A, B = "Paris it is.", "It is Lyon."
    model = nli({(A, B): [0.8, 0.1, 0.1], (B, A): [0.4, 0.2, 0.4]})
    v = view(["r", "r"], {Signal.SAMPLES: [[A, B], [A, A, ""]]})
    common = {"nli_model": "table", "fallback": None}
    # entail: W_AB = (0.8 + 0.4)/2 = 0.6; L = I - W/1.6 has eigenvalues 0 and 0.75
    assert scores("eigv", v, variant="nli_entail", **common)[0][0] == pytest.approx(1.25)
    assert scores("deg", v, variant="nli_entail", **common)[0][0] == pytest.approx(1 - 3.2 / 4)
    # contra: W_AB = ((1 - 0.1) + (1 - 0.4))/2 = 0.75
    assert scores("deg", v, variant="nli_contra", **common)[0][0] == pytest.approx(1 - 3.5 / 4)
    # B -> A is a tie (0.4 entailment, 0.4 contradiction): not "more likely", so two sets
    values, _ = scores("num_sem_sets", v, variant="nli", **common)
    assert values.tolist() == [2.0, 1.0]  # identical samples are one set without a model call
    assert sorted(model.seen) == sorted([(A, B), (B, A)])  # four detectors, each ordered pair asked once


def test_graph_nli_reuses_the_pairs_semantic_entropy_asked(nli) -> None:  # type: ignore[no-untyped-def]
    """With the question in the NLI texts (semantic entropy's input), the graph methods ask the model nothing new."""
    A, B, C = "Q? Paris", "Q? Lyon", "Q? Paris."
    table = {(x, y): [0.6, 0.3, 0.1] for x in (A, B, C) for y in (A, B, C) if x != y}
    model = nli(table)
    v = view(["r"], {Signal.SAMPLES: [["Paris", "Lyon", "Paris."]], Signal.SAMPLE_LOGLIKS: [None]})
    scores("semantic_entropy", v, nli_model="table", fallback=None)
    asked = len(model.seen)
    assert asked == 6  # every ordered pair of three distinct texts, once
    for name in ("eigv", "ecc", "deg"):
        scores(name, v, variant="nli_entail", include_question=True, nli_model="table", fallback=None)
    scores("kle", v, include_question=True, nli_model="table", fallback=None)
    assert len(model.seen) == asked


def test_relation_matrices_are_kept_per_item(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _relations.clear_memory()
    calls = []
    real = _relations._lexical
    monkeypatch.setattr(_relations, "_lexical", lambda *a: calls.append(a[1]) or real(*a))
    v = view(["r"], {Signal.SAMPLES: [["a b", "a c", "d"]]})
    for name in ("eigv", "deg", "ecc", "num_sem_sets"):
        scores(name, v)
    assert len(calls) == 1
    assert _relations.jaccard("A b", "a C") == pytest.approx(1 / 3)


def _binary_entropy_of_two_nodes(w: float, t: float) -> float:
    # L = [[w, -w], [-w, w]] (eigenvalues 0, 2w): expm(-tL) = 1/2 [[1 + e, 1 - e], [1 - e, 1 + e]], e = exp(-2tw);
    # unit diagonal gives off-diagonal c = (1 - e)/(1 + e) = tanh(tw); / 2 has eigenvalues (1 +- c)/2
    p = (1 + math.tanh(t * w)) / 2
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def test_kle_heat_kernel_entropy_by_hand(nli) -> None:  # type: ignore[no-untyped-def]
    A, B = "Paris it is.", "It is Lyon."
    nli({(A, B): [0.8, 0.1, 0.1], (B, A): [0.4, 0.2, 0.4]})
    v = view(["r", "r"], {Signal.SAMPLES: [["a b", "a c"], ["x", "y", "z"]]})
    values, _ = scores("kle", v, variant="jaccard")
    assert values[0] == pytest.approx(_binary_entropy_of_two_nodes(1 / 3, 0.3))
    assert values[1] == pytest.approx(math.log(3))  # no edges: K = I/3, the maximum entropy
    assert scores("kle", v, variant="jaccard", scale=True)[0][1] == pytest.approx(1.0)
    # f_AB = 0.8 + 0.5 * 0.1, f_BA = 0.4 + 0.5 * 0.2: W_AB = f_AB + f_BA = 1.35
    w = view(["r"], {Signal.SAMPLES: [[A, B]]})
    assert scores("kle", w, nli_model="table", fallback=None)[0][0] == pytest.approx(
        _binary_entropy_of_two_nodes(1.35, 0.3))


# ------------------------------------------------------------------------------------------------ n-gram
def test_selfcheck_ngram_unigram_of_samples_and_answer() -> None:
    # counts over "a b a" + "a c": a 3, b 1, c 1 (N = 5); the answer's tokens: a, b, a
    v = view(["a b a", "", "a"], {Signal.SAMPLES: [["a c"], ["a"], [""]]})
    values, reasons = scores("selfcheck_ngram", v)
    assert values[0] == pytest.approx(math.log(5))  # max: -log(1/5) (one sentence)
    assert np.isnan(values[1]) and reasons[1] == "empty response"
    assert np.isnan(values[2]) and reasons[2] == "all samples are empty"
    avg, _ = scores("selfcheck_ngram", v, variant="avg")
    assert avg[0] == pytest.approx((2 * math.log(5 / 3) + math.log(5)) / 3)
    smooth, _ = scores("selfcheck_ngram", v, smoothing=1.0)  # (1 + 1) / (5 + 1 * 4): 3 words + the unknown entry
    assert smooth[0] == pytest.approx(-math.log(2 / 9))


# ------------------------------------------------------------------------------------------------ CoCoA
def test_cocoa_variants_by_hand() -> None:
    # answer "a b"; samples "a b" (J = 1) and "a c" (J = 1/3): mean dissimilarity (0 + 2/3) / 2 = 1/3
    sig = {Signal.SAMPLES: [["a b", "a c"], ["a"], ["a"]], Signal.ANSWER_ENTROPIES: [np.array([0.2, 0.4]), None,
                                                                                      np.zeros(0)]}
    v = view(["a b", "", "a"], sig, logprobs=[[-0.5, -1.5], [], [-0.1]])
    msp, reasons = scores("cocoa", v, similarity="jaccard")
    assert msp[0] == pytest.approx(2.0 / 3) and np.isnan(msp[1]) and reasons[1] == "empty response"
    assert scores("cocoa", v, similarity="jaccard", variant="ppl")[0][0] == pytest.approx(1.0 / 3)
    ent, reasons = scores("cocoa", v, similarity="jaccard", variant="entropy")
    assert ent[0] == pytest.approx(0.3 / 3) and np.isnan(ent[2]) and reasons[2] == "empty response"
    # ROUGE-L F1("a b", "a c") = 1/2: mean dissimilarity 1/4
    assert scores("cocoa", v)[0][0] == pytest.approx(2.0 / 4)
    assert msp[2] == pytest.approx(0.0)  # the one sample repeats the answer: full consistency


# ------------------------------------------------------------------------------------------------ Mahalanobis
def _hidden_view(points: list[tuple[float, float]], labels: list[int], noise_layer: bool = True) -> SignalView:
    rng = np.random.default_rng(0)
    hidden = [np.stack([rng.normal(size=2), np.array(p)]) if noise_layer else np.array([p]) for p in points]
    return view(["r"] * len(points), {Signal.HIDDEN_MEAN: hidden}, labels=labels)


CORRECT = [(1.0, 0.0), (-1.0, 0.0), (0.0, 2.0), (0.0, -2.0)] * 3  # mean 0, variances 0.5 and 2, no covariance


def test_mahalanobis_by_hand_and_relative_against_a_direct_inverse() -> None:
    wrong = [(5.0, 5.0), (4.0, 6.0), (6.0, 3.0)]
    train = _hidden_view(CORRECT + wrong, [0] * 12 + [1] * 3)
    test = _hidden_view([(1.0, 1.0), (0.0, 0.0)], [0, 0]).subset([0, 1], with_labels=False)
    det = DETECTORS.get("mahalanobis")()
    det.fit(train, None)
    assert det.score(test).values.tolist() == pytest.approx([1 / 0.5 + 1 / 2, 0.0])
    rel = DETECTORS.get("relative_mahalanobis")()
    rel.fit(train, None)
    X = np.array(CORRECT + wrong)
    mu, prec = X.mean(axis=0), np.linalg.inv(np.cov(X.T, bias=True))
    background = [(np.array(p) - mu) @ prec @ (np.array(p) - mu) for p in [(1.0, 1.0), (0.0, 0.0)]]
    assert rel.score(test).values.tolist() == pytest.approx([2.5 - background[0], 0.0 - background[1]])


def test_mahalanobis_needs_correct_training_answers_and_picks_a_layer_on_validation() -> None:
    few = _hidden_view(CORRECT[:5] + [(5.0, 5.0)] * 8, [0] * 5 + [1] * 8)
    det = DETECTORS.get("mahalanobis")()
    det.fit(few, None)
    out = det.score(few.subset(range(3), with_labels=False))
    assert np.isnan(out.values).all() and "only 5 valid training answers judged correct" in out.reasons[0]
    train = _hidden_view([*CORRECT, (5.0, 5.0), (4.0, 6.0)], [0] * 12 + [1] * 2)
    val = _hidden_view([(0.5, 0.5), (-0.5, 1.0), (6.0, 6.0), (5.0, 4.0)], [0, 0, 1, 1])
    chosen = DETECTORS.get("mahalanobis")(layer="val")
    chosen.fit(train, val)
    assert chosen.layer == 1 and chosen.fit_info["val_auroc_by_layer"][1] == 1.0
