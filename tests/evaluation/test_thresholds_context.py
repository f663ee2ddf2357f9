"""Thresholded metrics (hand-computed) and the long-context policy."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.evaluation.thresholds import Confusion, at_threshold, best_f1_threshold
from haldet.text.long_context import GAP, fit_context, passages


def test_best_f1_threshold_and_confusion_by_hand() -> None:
    y = np.array([1, 1, 0, 0, 1])
    s = np.array([0.9, 0.4, 0.4, 0.1, 0.8])
    # t=0.9: F1 2/4; t=0.8: 4/5; t=0.4: tp3 fp1 fn0 -> 6/7; t=0.1: 6/8
    assert best_f1_threshold(y, s) == 0.4
    c = at_threshold(y, s, 0.4)
    assert (c.tp, c.fp, c.fn, c.tn) == (3, 1, 0, 1)
    assert c.precision == 0.75 and c.recall == 1.0 and c.f1 == pytest.approx(6 / 7)
    assert c.accuracy == 0.8 and c.balanced_accuracy == 0.75
    # NaN scores are no prediction (coverage is reported apart)
    assert at_threshold(np.array([1, 0]), np.array([np.nan, 0.3]), 0.5).n == 1


def test_all_positive_predictor_and_undefined_values() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.15).astype(int)
    p = y.mean()
    c = Confusion.of(y, np.ones_like(y))
    assert c.precision == pytest.approx(p) and c.recall == 1.0 and c.f1 == pytest.approx(2 * p / (1 + p))
    none = Confusion.of(y, np.zeros_like(y))
    assert none.precision is None and none.f1 == 0.0 and none.recall == 0.0
    assert Confusion.of(np.zeros(3), np.zeros(3)).f1 is None and Confusion.of(np.zeros(3), np.zeros(3)).recall is None
    assert best_f1_threshold(np.zeros(4), np.arange(4.0)) is None


def test_ties_in_f1_choose_the_higher_threshold() -> None:
    y = np.array([1, 0, 0, 0])
    s = np.array([0.9, 0.5, 0.2, 0.1])
    assert best_f1_threshold(y, s) == 0.9


ARTICLE = ("The river Elbe rises in the Krkonose mountains. It flows through Dresden and Hamburg.\n\n"
           "Cheese making in the region dates to the middle ages. Farmers sell it at markets.\n\n"
           "The Elbe reaches the North Sea at Cuxhaven after 1,094 kilometres.")


def count(text: str) -> int:
    return len(text.split())


def test_long_context_truncates_to_the_relevant_passages() -> None:
    fit = fit_context(ARTICLE, "How long is the Elbe and where does it reach the sea?", 24, count)
    assert fit.truncated and not fit.too_long and fit.kept_tokens <= 24 < fit.original_tokens
    assert "1,094 kilometres" in fit.text and "Cheese" not in fit.text
    assert GAP.strip() in fit.text
    # passages keep their original order
    assert fit.text.index("Elbe rises") < fit.text.index("North Sea")


def test_long_context_fits_untouched_or_skips_with_a_reason() -> None:
    assert fit_context(ARTICLE, "q", 1000, count).text == ARTICLE
    skipped = fit_context(ARTICLE, "q", 10, count, policy="skip")
    assert skipped.too_long and skipped.text == ARTICLE and "exceeds the 10-token budget" in skipped.reason
    with pytest.raises(ValueError):
        fit_context(ARTICLE, "q", 10, count, policy="middle")
    assert len(passages(ARTICLE)) == 5
