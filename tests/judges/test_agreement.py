"""Cohen's kappa (one implementation, scikit-learn's, behind `haldet.judges.agreement.cohen_kappa`) by hand, the
undefined case, the judges' confusion table, and the longform claim labeller's agreement computed by the same
function."""

from __future__ import annotations

import math

import pytest

from haldet.judges.agreement import agreement, cohen_kappa
from haldet.schema import LABEL_META, Category, Instance, Label, SpanLabel
from haldet.suites.longform.agreement import label_agreement


def test_cohen_kappa_hand_computed() -> None:
    # 10 items; a: 6 correct, 4 hallucination; b agrees on 5 correct + 3 hallucination.
    a = ["correct"] * 6 + ["hallucination"] * 4
    b = ["correct"] * 5 + ["hallucination"] + ["hallucination"] * 3 + ["correct"]
    # p_o = 8/10; a: 0.6/0.4, b: 0.6/0.4 -> p_e = 0.36 + 0.16 = 0.52; kappa = (0.8 - 0.52) / 0.48 = 0.58333
    kappa, observed = cohen_kappa(a, b)
    assert observed == pytest.approx(0.8) and kappa == pytest.approx(0.28 / 0.48)
    # three categories used, a fourth declared and unused (it adds nothing to p_e):
    # a = (c, c, h, x), b = (c, h, h, i): p_o = 2/4; p_e = 2/4*1/4 + 1/4*2/4 + 1/4*0 + 0*1/4 = 1/4 -> kappa 1/3
    kappa, observed = cohen_kappa(list("cchx"), list("chhi"), list("chxi"))
    assert observed == pytest.approx(0.5) and kappa == pytest.approx(1 / 3)
    # both raters put every item in one and the same category: p_e = 1, kappa undefined (NaN), never a number
    kappa, observed = cohen_kappa(["correct"] * 3, ["correct"] * 3)
    assert math.isnan(kappa) and observed == 1.0
    assert all(math.isnan(v) for v in cohen_kappa([], []))
    with pytest.raises(ValueError, match="differ in length"):
        cohen_kappa(["a"], ["a", "b"])


def test_agreement_confusion_table() -> None:
    def lab(i: int, c: str) -> Label:
        return Label(id=f"t/test/{i}", category=Category(c), judge="j")

    a = {f"t/test/{i}": lab(i, c) for i, c in enumerate(["correct", "correct", "hallucination", "abstention"])}
    b = {f"t/test/{i}": lab(i, c) for i, c in enumerate(["correct", "hallucination", "hallucination", "invalid"])}
    agr = agreement(a, b, judge_a="rule", judge_b="llm")
    assert agr.n == 4 and agr.observed == pytest.approx(0.5)
    assert agr.kappa == pytest.approx(1 / 3)  # the hand computation above, over the four categories
    cats = agr.categories
    assert agr.table[cats.index("correct")][cats.index("hallucination")] == 1
    assert agr.table[cats.index("abstention")][cats.index("invalid")] == 1
    assert agr.disagreements == ["t/test/1", "t/test/3"]
    binary = agreement(a, b, binary=True)
    # (c, c, h) vs (c, h, h): p_o 2/3, p_e 2/3*1/3 + 1/3*2/3 = 4/9 -> kappa (2/9) / (5/9) = 0.4
    assert binary.n == 3 and binary.table == [[1, 1], [0, 1]] and binary.kappa == pytest.approx(0.4)
    assert agreement(a, a, binary=True).as_dict()["kappa"] == 1.0


def test_claim_labeller_agreement_uses_the_same_kappa() -> None:
    def claim(k: int, data: int, labeller: Category) -> SpanLabel:
        return SpanLabel(start=k, end=k + 1, text="x", kind="claim", category=labeller,
                         meta={LABEL_META: {"data_label": data, "source": "verify:v"}})

    c, h = Category.CORRECT, Category.HALLUCINATION
    inst = Instance(id="d/test/1", dataset="d", scenario="longform", task_type="long_form", question="q",
                    response="abcdef", units=[claim(0, 0, c), claim(1, 0, h), claim(2, 1, h)])
    agree = label_agreement([inst])
    assert agree["kappa"] == pytest.approx(0.4) == cohen_kappa([0, 0, 1], [0, 1, 1])[0]
    one_class = inst.model_copy(update={"units": [claim(0, 0, c), claim(1, 0, c)]})
    assert label_agreement([one_class])["kappa"] is None  # undefined, reported as null
