"""The five unit-level detectors' formulas against hand computations, and their token -> unit aggregation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from haldet.detectors.ccp import ccp_scores
from haldet.detectors.focus import corrected_uncertainty, propagate
from haldet.detectors.unit_sar import scopes, weighted_nll
from haldet.models.idf import idf_values


def test_focus_idf_corrected_uncertainty_by_hand() -> None:
    ids = np.array([[0, 1, 2]])
    lps = np.log(np.array([[0.5, 0.3, 0.005]]))  # the third is below the 0.01 threshold: dropped
    idf = np.array([1.0, 2.0, 5.0])
    p_hat = np.array([0.5 * 1, 0.3 * 2]) / 1.1
    bits = -sum(p * math.log2(p) for p in p_hat)
    expected = -math.log(p_hat[0] + 1e-10) + 2 ** bits
    assert corrected_uncertainty(ids, lps, idf, 0.01)[0] == pytest.approx(expected)


def test_focus_threshold_never_masks_the_observed_token() -> None:
    """The original Focus code keeps the observed token whatever its probability: log([.005, .6, .395]) with
    uniform IDF and threshold 0.01 gives -ln(.005) + 2^H(.005, .6, .395) = 7.31 (masking it gave 24.98)."""
    ids = np.array([[0, 1, 2]])
    p = np.array([0.005, 0.6, 0.395])
    expected = -math.log(0.005 + 1e-10) + 2 ** -sum(x * math.log2(x) for x in p)
    got = corrected_uncertainty(ids, np.log(p[None]), np.ones(3), 0.01)[0]
    assert expected == pytest.approx(7.31, abs=5e-3)
    assert got == pytest.approx(expected)
    # every entry below the threshold: only the observed token is left, p_hat = (1, 0, 0): h = -ln(1) + 2^0 = 1
    low = corrected_uncertainty(ids, np.log(np.array([[0.004, 0.003, 0.002]])), np.ones(3), 0.01)
    assert low[0] == pytest.approx(1.0)


def test_focus_vocab_support_exact_only_where_topk_is_exhaustive() -> None:
    """support='vocab' (no top-k renormalisation) equals the top-k value where the top-k's last alternative is
    below the threshold (every passing token is in it) and is NaN where a passing token may be missing."""
    ids = np.array([[0, 1, 2], [0, 1, 2]])
    lps = np.log(np.array([[0.5, 0.3, 0.005], [0.5, 0.3, 0.02]]))
    idf = np.array([1.0, 2.0, 5.0])
    topk = corrected_uncertainty(ids, lps, idf, 0.01, "topk")
    vocab = corrected_uncertainty(ids, lps, idf, 0.01, "vocab")
    assert vocab[0] == pytest.approx(topk[0])
    assert np.isfinite(topk[1]) and np.isnan(vocab[1])


def test_focus_propagation_from_earlier_keywords_by_hand() -> None:
    """Default (original Focus): a keyword takes penalties only from earlier keywords, attention renormalised
    over those; the non-keyword token 1 passes nothing on."""
    h = np.array([1.0, 2.0, 3.0, 4.0])
    keywords = np.array([True, False, True, True])
    att = np.array([[0, 0, 0, 0], [0.5, 0, 0, 0], [0.1, 0.7, 0, 0], [0.2, 0.3, 0.4, 0]])
    y = propagate(h, att, keywords, gamma=0.9)
    u2 = 3 + 0.9 * 0.1 * 1.0 / (0.1 + 1e-6)
    u3 = 4 + 0.9 * (0.2 * 1.0 + 0.4 * u2) / (0.6 + 1e-6)
    assert y == pytest.approx([1.0, 0.0, u2, u3])


def test_focus_propagation_all_earlier_tokens_by_hand() -> None:
    h = np.array([1.0, 2.0, 3.0])
    keywords = np.array([False, True, True])
    att = np.array([[0, 0, 0], [0.5, 0, 0], [0.2, 0.6, 0]])
    y = propagate(h, att, keywords, gamma=0.9, propagation="all")
    u1 = 2 + 0.9 * (0.5 / (0.5 + 1e-6)) * 1.0
    u2 = 3 + 0.9 * (0.2 * 1.0 + 0.6 * u1) / (0.8 + 1e-6)
    assert y == pytest.approx([0.0, u1, u2])  # the non-keyword scores 0 but still propagates its h
    # the default ignores the non-keyword: token 1 has no earlier keyword, token 2 only token 1
    assert propagate(h, att, keywords, gamma=0.9) == pytest.approx([0.0, 2.0, 3 + 0.9 * 0.6 * 2.0 / (0.6 + 1e-6)])


def test_idf_formulas_by_hand() -> None:
    df, n = np.array([0, 1, 3]), 3
    assert idf_values(df, n, "focus") == pytest.approx([math.log(3), math.log(1.5), math.log(0.75)])
    assert idf_values(df, n, "smoothed") == pytest.approx([math.log(4) + 1, math.log(2) + 1, 1.0])
    with pytest.raises(ValueError, match="unknown IDF formula"):
        idf_values(df, n, "bm25")


def test_ccp_by_hand() -> None:
    lps = np.log(np.array([[0.6, 0.3, 0.1]]))
    entail, contradict = np.array([[0.0, 1.0, 0.0]]), np.array([[0.0, 0.0, 1.0]])
    assert ccp_scores(lps, entail, contradict)[0] == pytest.approx(-math.log(0.9 / 1.0))
    neutral = np.zeros((1, 3))
    assert ccp_scores(lps, neutral, neutral)[0] == pytest.approx(0.0)  # only the token itself: p / p
    soft_e, soft_c = np.array([[0.0, 0.5, 0.0]]), np.array([[0.0, 0.5, 1.0]])
    assert ccp_scores(lps, soft_e, soft_c)[0] == pytest.approx(-math.log(0.75 / 1.0))


def test_token_sar_weights_and_scopes_by_hand() -> None:
    assert weighted_nll(np.array([-1.0, -2.0]), np.array([0.5, 1.5]), "sum") == pytest.approx([0.25, 1.5])
    assert weighted_nll(np.array([-1.0, -2.0]), np.array([0.5, 1.5]), "none") == pytest.approx([0.5, 3.0])
    assert weighted_nll(np.array([-1.0, -3.0]), np.zeros(2), "sum") == pytest.approx([0.5, 1.5])
    text = "Ab. Cd."
    offsets = np.array([[0, 2], [2, 3], [4, 6], [6, 7]])
    got = [(a, b, list(i)) for a, b, i in scopes(text, offsets, [0, 4])]
    assert got == [(0, 4, [0, 1]), (4, 7, [2, 3])]
    assert [(a, b, list(i)) for a, b, i in scopes(text, offsets, None)] == [(0, 7, [0, 1, 2, 3])]


def test_idf_from_a_recorded_local_corpus(tmp_path) -> None:
    """A local .txt corpus (one document per line, blank lines skipped): document frequencies counted once per
    document, the corpus recorded by path and fingerprint, the default Focus formula ln(N / (df + 1)) applied."""
    from haldet.models.idf import IDFTable, corpus_files, corpus_identity, document_frequencies, documents

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Paris Paris Paris\nParis and Rome\nRome\n\nBerlin\n", encoding="utf-8")
    vocab = {"Paris": 0, "and": 1, "Rome": 2, "Berlin": 3, "Oslo": 4}
    df, n = document_frequencies(lambda texts: [[vocab[w] for w in t.split()] for t in texts],
                                 documents(corpus_files(str(corpus))), len(vocab))
    assert n == 4 and df.tolist() == [2, 1, 2, 1, 0]  # Paris once in the first document, Oslo nowhere
    table = IDFTable(df, n)
    assert table.idf() == pytest.approx([math.log(4 / 3), math.log(2), math.log(4 / 3), math.log(2), math.log(4)])
    assert table.idf("smoothed")[4] == pytest.approx(math.log(5) + 1)
    identity = corpus_identity(str(corpus))
    assert identity["corpus"] == str(corpus) and identity["fingerprint"]
    corpus.write_text("Oslo\n", encoding="utf-8")
    assert corpus_identity(str(corpus))["fingerprint"] != identity["fingerprint"]  # an edited corpus re-scores
