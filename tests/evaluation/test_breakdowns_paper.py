"""HalluEntity's Figs. 3c/5/6 breakdowns at the paper's F1-optimal thresholds, on eight hand-made entities whose
thresholds and error rates are computed by hand in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.evaluation.breakdowns import paper_breakdowns
from haldet.evaluation.units import UnitData

# unit:      1      2      3      4      5      6      7      8
Y = [1, 0, 1, 0, 1, 0, 0, 1]
S = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
TAGS = {"pos": ["NOUN", "NOUN", "VERB", "VERB", "NOUN", "NOUN", "VERB", "VERB"],
        "ner": ["PERSON", "PERSON", "O", "O", "O", "O", "O", "PERSON"],
        "position": ["first"] * 4 + ["last"] * 4,
        "rate": ["<10%"] * 4 + [">20%"] * 4}


def units() -> UnitData:
    return UnitData(np.array(Y), np.array(S), np.array([0, 0, 0, 0, 1, 1, 1, 1]), tags=TAGS)


def test_paper_breakdowns_known_answers() -> None:
    got = {m.metric: m.value for m in paper_breakdowns(units(), 1.0)}
    # best F1 over all eight: t=0.5 gives tp3 fp2 fn1 -> 6/9 and t=0.2 gives tp4 fp4 -> 8/12: a tie, the higher wins
    assert got["threshold_test"] == 0.5  # predicted hallucinated: units 1-5
    # PERSON: 1 (TP), 2 (FP), 8 (FN) -> FPR 1/1, FNR 1/2; O: 3 TP, 4 FP, 5 TP, 6 TN, 7 TN -> FPR 1/3, FNR 0/2
    assert got["fpr_test[ner=PERSON]"] == 1.0 and got["fnr_test[ner=PERSON]"] == 0.5
    assert got["fpr_test[ner=O]"] == pytest.approx(1 / 3) and got["fnr_test[ner=O]"] == 0.0
    # NOUN: 1 TP, 2 FP, 5 TP, 6 TN -> 1/2, 0; VERB: 3 TP, 4 FP, 7 TN, 8 FN -> 1/2, 1/2
    assert (got["fpr_test[pos=NOUN]"], got["fnr_test[pos=NOUN]"]) == (0.5, 0.0)
    assert (got["fpr_test[pos=VERB]"], got["fnr_test[pos=VERB]"]) == (0.5, 0.5)
    # first six words: 1-4 all predicted -> FPR 1, FNR 0; last: 5 TP, 6 TN, 7 TN, 8 FN -> 0, 1/2
    assert (got["fpr_test[position=first]"], got["fnr_test[position=first]"]) == (1.0, 0.0)
    assert (got["fpr_test[position=last]"], got["fnr_test[position=last]"]) == (0.0, 0.5)
    # each rate group at its own best threshold: <10% (y 1 0 1 0): t=0.7 -> tp2 fp1 -> F1 0.8, P 2/3, R 1
    assert got["f1_opt_test[rate=<10%]"] == pytest.approx(0.8)
    assert got["precision_opt_test[rate=<10%]"] == pytest.approx(2 / 3) and got["recall_opt_test[rate=<10%]"] == 1.0
    # >20% (y 1 0 0 1 over 0.5..0.2): t=0.5 -> 2/3 ties t=0.2 -> 4/6; the higher: P 1, R 1/2
    assert got["f1_opt_test[rate=>20%]"] == pytest.approx(2 / 3)
    assert (got["precision_opt_test[rate=>20%]"], got["recall_opt_test[rate=>20%]"]) == (1.0, 0.5)
    assert not any("10-20%" in name for name in got)  # no unit in that group: no row


def test_invalid_scores_are_left_out_and_no_positive_means_no_threshold() -> None:
    data = units()
    data.s[7] = np.nan  # unit 8 (a missed hallucination) unscored: t=0.5 now wins alone (6/9 vs 6/10 at t=0.4)
    got = {m.metric: m.value for m in paper_breakdowns(data, 7 / 8)}
    assert got["threshold_test"] == 0.5 and got["fnr_test[ner=PERSON]"] == 0.0
    none = UnitData(np.zeros(3, dtype=int), np.array([0.1, 0.2, 0.3]), np.zeros(3, dtype=int),
                    tags={k: v[:3] for k, v in TAGS.items()})
    out = paper_breakdowns(none, 1.0)
    assert [(m.metric, m.value) for m in out] == [("threshold_test", None)] and "no hallucinated" in out[0].note
