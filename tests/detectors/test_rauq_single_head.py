"""RAUQ's single-head variant by hand: the head of each layer chosen once on the training answers' tokens pooled,
then used for every answer; a training split with nothing to choose on gives NaN with the reason."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from haldet.detectors.base import DETECTORS
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView


def view(lps: list[list[float]], attns: list[np.ndarray]) -> SignalView:
    ids = [f"t/train/{i}" for i in range(len(lps))]
    values: dict[Signal, list[Any]] = {Signal.TOKEN_LOGPROBS: [np.array(lp) for lp in lps],
                                       Signal.TOKEN_ATTN_PREV: attns}
    inst = [Instance(id=i, dataset="t", scenario="qa_open", task_type="short_answer", question="q") for i in ids]
    gens = [Generation(id=i, prompt="p", response="r", token_ids=list(range(len(lp))), token_logprobs=lp,
                       finish_reason="stop", n_tokens=len(lp), model="m") for i, lp in zip(ids, lps, strict=True)]
    return SignalView(ids=ids, instances=inst, generations=gens,
                      loader=lambda s, wanted: [values[s][ids.index(i)] for i in wanted])


def training() -> SignalView:
    a = np.zeros((3, 2, 4))  # three tokens read (columns 1..3)
    a[1] = [[0, 0.3, 0.3, 0.3], [0, 0.6, 0.6, 0.6]]
    a[2] = [[0, 0.7, 0.7, 0.7], [0, 0.1, 0.1, 0.1]]
    b = np.zeros((3, 2, 2))  # one token read
    b[1] = [[0, 0.8], [0, 0.0]]
    b[2] = [[0, 0.5], [0, 0.2]]
    c = np.ones((3, 2, 1))  # one-token answer: nothing read
    # layer 1 pooled over the four tokens: head 0 (0.9 + 0.8) / 4 = 0.425, head 1 1.8 / 4 = 0.45 -> head 1 (the
    # mean of each answer's mean would pick head 0: 0.55 > 0.3); layer 2: head 0 (2.6 / 4 > 0.5 / 4)
    return view([[-0.1] * 4, [-0.1] * 2, [-0.1]], [a, b, c])


def test_rauq_single_head_by_hand() -> None:
    det = DETECTORS.get("rauq_single_head")()
    assert det.trains and not DETECTORS.get("rauq").trains
    det.fit(training(), None)
    assert det.selected == [0, 1, 0]  # layer 0: a tie of zeros, the first head
    attn = np.zeros((3, 2, 3))
    attn[1] = [[0, 0.6, 0.2], [0, 0.1, 0.5]]  # on its own this answer would pick head 0 in layer 1
    attn[2] = [[0, 0.1, 0.1], [0, 0.9, 0.9]]  # and head 1 in layer 2
    p = [0.9, 0.5, 0.8]
    test = view([list(np.log(p))], [attn])
    # alpha 0.2; layer 1, head 1: c = (0.9, 0.2*0.5 + 0.8*0.1*0.9 = 0.172, 0.2*0.8 + 0.8*0.5*0.172 = 0.2288),
    # u = 1.1135094; layer 2, head 0: c = (0.9, 0.172, 0.16 + 0.8*0.1*0.172 = 0.17376), u = 1.2052339 -> max
    assert det.score(test).values[0] == pytest.approx(1.2052339, abs=1e-7)
    assert DETECTORS.get("rauq")().score(test).values[0] == pytest.approx(0.7141599, abs=1e-7)  # per-answer heads


def test_rauq_single_head_without_heads_to_choose() -> None:
    det = DETECTORS.get("rauq_single_head")(variant="entropy")
    det.fit(view([[-0.1]], [np.ones((3, 2, 1))]), None)
    attn = np.zeros((3, 2, 2))
    terms = np.zeros((2, 5))
    terms[:, 4] = 0.5
    got = det.score(SignalView(ids=["t/test/0"], instances=[Instance(id="t/test/0", dataset="t", scenario="qa_open",
                                                                     task_type="short_answer", question="q")],
                               generations=[Generation(id="t/test/0", prompt="p", response="r", token_ids=[0, 1],
                                                       token_logprobs=[-0.1, -0.1], finish_reason="stop",
                                                       n_tokens=2, model="m")],
                               loader=lambda s, wanted: [attn if s is Signal.TOKEN_ATTN_PREV else terms]))
    assert np.isnan(got.values[0])
    assert got.reasons[0] == "no training answer of two or more tokens to choose the heads on"
    other = view([[-0.1, -0.1]], [np.zeros((4, 2, 2))])  # fitted on 3 layers, scored on 4: refused per item
    fitted = DETECTORS.get("rauq_single_head")()
    fitted.fit(training(), None)
    assert fitted.score(other).reasons[0] == "attention of (4, 2) (layers, heads); the heads were chosen on (3, 2)"
