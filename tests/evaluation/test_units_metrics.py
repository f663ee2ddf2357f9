"""Unit-level evaluation with known answers: hand-computed F1/precision/recall, the all-positive predictor,
random and planted scores, the threshold taken from validation, grouped bootstrap and grouped splits."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.evaluation.splits import grouped_split
from haldet.evaluation.thresholds import at_threshold
from haldet.evaluation.units import UnitData, best_f1, f1_precision_recall, tie_share, unit_metrics


def metric(values, name):
    return next(m for m in values if m.metric == name)


def test_best_f1_and_at_threshold_match_hand_computation() -> None:
    y = np.array([1, 0, 1, 0, 0, 1])
    s = np.array([0.9, 0.8, 0.7, 0.3, 0.2, 0.1])
    # >=0.9: F1 .5; >=0.8: .4; >=0.7: P 2/3 R 2/3 F1 2/3; >=0.1 (all): P .5 R 1 F1 2/3 too: the higher one wins
    t, f1, p, r = best_f1(y, s)
    assert t == 0.7 and f1 == pytest.approx(2 / 3) and p == pytest.approx(2 / 3) and r == pytest.approx(2 / 3)
    assert f1_precision_recall(at_threshold(y, s, 0.8)) == pytest.approx((0.4, 0.5, 1 / 3))
    # nothing predicted: precision 0, never a division error
    assert f1_precision_recall(at_threshold(y, s, 2.0)) == (0.0, 0.0, 0.0)


def test_all_positive_predictor_gives_f1_2p_over_1_plus_p() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.15).astype(int)
    p = y.mean()
    const = UnitData(y, np.ones(400), np.arange(400) // 4)
    out = unit_metrics(const, const, n_boot=0)
    assert metric(out, "f1_opt").value == pytest.approx(2 * p / (1 + p))
    assert metric(out, "precision_opt").value == pytest.approx(p)
    assert metric(out, "recall_opt").value == pytest.approx(1.0)
    assert metric(out, "auroc").value == pytest.approx(0.5)
    assert metric(out, "tie_share").value == 1.0 and metric(out, "base_rate").value == pytest.approx(p)


def test_random_scores_give_auroc_near_half_and_planted_signal_its_known_auroc() -> None:
    rng = np.random.default_rng(1)
    n = 6000
    y = (rng.random(n) < 0.2).astype(int)
    groups = np.arange(n) // 30
    noise = UnitData(y, rng.random(n), groups)
    assert abs(metric(unit_metrics(noise, None, n_boot=0), "auroc").value - 0.5) < 0.03
    # scores N(d, 1) for positives and N(0, 1) for negatives: AUROC = Phi(d / sqrt 2) = 0.760 for d = 1
    planted = UnitData(y, rng.normal(size=n) + y * 1.0, groups)
    out = unit_metrics(planted, None, n_boot=200)
    au = metric(out, "auroc")
    assert abs(au.value - 0.7602) < 0.02 and au.ci_low < au.value < au.ci_high
    # negative control: the same test fails on random scores
    assert abs(metric(unit_metrics(noise, None, n_boot=0), "auroc").value - 0.7602) > 0.2


def test_threshold_comes_from_validation_not_test() -> None:
    y = np.array([1, 0, 1, 0, 0, 1])
    s = np.array([0.9, 0.8, 0.7, 0.3, 0.2, 0.1])
    test = UnitData(y, s, np.arange(6))
    val = UnitData(np.array([1, 1, 0]), np.array([0.85, 0.95, 0.1]), np.arange(3))  # best val threshold: 0.85
    out = unit_metrics(test, val, n_boot=0)
    assert metric(out, "threshold").value == 0.85
    assert metric(out, "f1_opt").value == pytest.approx(0.5)  # only 0.9 is predicted on test
    assert metric(out, "f1_opt_test").value == pytest.approx(2 / 3)  # the tune-on-test variant, labelled
    assert "tuned on the test units" in metric(out, "f1_opt_test").note
    no_val = unit_metrics(test, None, n_boot=0)
    assert metric(no_val, "f1_opt").value is None and "no validation" in metric(no_val, "f1_opt").note


def test_invalid_scores_are_left_out_and_coverage_counts_them() -> None:
    y = np.array([1, 0, 1, 0])
    s = np.array([0.9, np.nan, 0.7, 0.1])
    au = metric(unit_metrics(UnitData(y, s, np.arange(4)), None, n_boot=0), "auroc")
    assert au.n == 3 and au.n_pos == 2 and au.coverage == 0.75 and au.value == 1.0


def test_grouped_bootstrap_resamples_items_not_units() -> None:
    """Two items whose units are perfectly separated but with opposite directions: a unit bootstrap would be
    narrow; the item bootstrap sees resamples made of one item only (AUROC 1 or 0)."""
    y = np.array([1] * 20 + [0] * 20 + [1] * 20 + [0] * 20)
    s = np.r_[np.full(20, 0.9), np.full(20, 0.1), np.full(20, 0.2), np.full(20, 0.8)]
    groups = np.r_[np.zeros(40), np.ones(40)].astype(int)
    au = metric(unit_metrics(UnitData(y, s, groups), None, n_boot=400, seed=3), "auroc")
    assert au.value == pytest.approx(0.75)  # pooled: 0.9 beats both negatives, 0.2 beats 0.1 only
    assert au.ci_low == pytest.approx(0.0) and au.ci_high == pytest.approx(1.0)


def test_tie_share() -> None:
    assert tie_share(np.array([1.0, 1.0, 2.0, 3.0])) == 0.5


def test_grouped_split_never_puts_one_group_in_two_parts() -> None:
    groups = {f"item{i}": f"doc{i // 3}" for i in range(60)}
    split = grouped_split(groups, (0.6, 0.2, 0.2), seed=7)
    seen: dict[str, str] = {}
    for part, ids in split.items():
        for item in ids:
            assert seen.setdefault(groups[item], part) == part
    assert sorted(i for ids in split.values() for i in ids) == sorted(groups)
    assert all(split.values())


def test_breakdowns_by_hand() -> None:
    from haldet.evaluation.breakdowns import breakdown_metrics

    # 6 units, threshold 0.5: predicted positive = s >= 0.5
    y = np.array([1, 0, 0, 1, 0, 1])
    s = np.array([0.9, 0.7, 0.1, 0.2, 0.3, 0.8])
    tags = {"rate": np.array(["<10%", "<10%", "<10%", ">20%", ">20%", ">20%"]),
            "pos": np.array(["NOUN", "NOUN", "DET", "PROPN", "DET", "PROPN"]),
            "ner": np.array(["O"] * 6), "position": np.array(["first", "middle", "last"] * 2),
            "content": np.array(["yes", "yes", "no", "yes", "no", "yes"])}
    out = {m.metric: m for m in breakdown_metrics(UnitData(y, s, np.arange(6) // 3, tags=tags), 0.5, 1.0)}
    assert out["fpr[pos=NOUN]"].value == 1.0 and out["fnr[pos=NOUN]"].value == 0.0  # the 0.7 negative flagged
    assert out["fnr[pos=PROPN]"].value == 0.5 and out["fpr[pos=PROPN]"].value is None  # no negative PROPN
    assert out["fpr[pos=DET]"].value == 0.0 and out["fnr[pos=DET]"].n == 2
    assert out["precision_opt[rate=<10%]"].value == 0.5 and out["recall_opt[rate=<10%]"].value == 1.0
    assert out["recall_opt[rate=>20%]"].value == 0.5 and out["auroc[rate=>20%]"].value == 0.5
    assert "f1_opt[rate=10-20%]" not in out  # no item in that group
    # content units 0, 1, 3, 5: positives 0.9, 0.2, 0.8 against the negative 0.7 -> 2 of 3 pairs ranked right
    assert out["auroc[content]"].n == 4 and out["auroc[content]"].value == pytest.approx(2 / 3)
    assert breakdown_metrics(UnitData(y, s, np.arange(6), tags=tags), None, 1.0) == []  # no validation threshold


def test_unit_prr_rows_with_grouped_bootstrap_cis() -> None:
    from haldet.evaluation.rejection import rejection_metrics

    rng = np.random.default_rng(8)
    y = (rng.random(120) < 0.4).astype(int)
    s = y + rng.normal(size=120)
    data = UnitData(y, s, np.arange(120) // 3)
    out = {m.metric: m for m in unit_metrics(data, None, n_boot=200)}
    want = rejection_metrics(y, s, np.arange(120)[None, :], ("prr", "prr_50", "aurc"))
    for m in ("prr", "prr_50", "aurc"):
        assert out[m].value == pytest.approx(want[m][0]) and out[m].ci_low <= out[m].value <= out[m].ci_high
    assert out["prr"].value > 0.3
