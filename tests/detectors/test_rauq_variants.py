"""RAUQ's entropy variant (token confidence log V - H_t from TOKEN_CHERNOFF's KL column) by hand, and its identity:
the variant and the resolved alpha are recorded."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from haldet.backends.hf.distribution import chernoff_terms
from haldet.detectors.base import DETECTORS
from haldet.detectors.rauq import KL_AT_T1
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView


def view(values: dict[Signal, list[Any]], n_tokens: int = 3) -> SignalView:
    n = len(next(iter(values.values())))
    ids = [f"t/test/{i}" for i in range(n)]
    inst = [Instance(id=i, dataset="t", scenario="qa_open", task_type="short_answer", question="q") for i in ids]
    gens = [Generation(id=i, prompt="p", response="r", token_ids=list(range(n_tokens)),
                       token_logprobs=[-0.1] * n_tokens, finish_reason="stop", n_tokens=n_tokens, model="m")
            for i in ids]
    return SignalView(ids=ids, instances=inst, generations=gens,
                      loader=lambda s, wanted: [values[s][ids.index(i)] for i in wanted])


def attention() -> np.ndarray:
    attn = np.zeros((3, 2, 3))  # [layer, head, token]; column 0 is never read; middle third of 3 layers: 1 and 2
    attn[0] = [[0, 0.01, 0.01], [0, 0.01, 0.01]]
    attn[1] = [[0, 0.6, 0.2], [0, 0.1, 0.5]]  # head 0 (mean 0.4 > 0.3)
    attn[2] = [[0, 0.1, 0.1], [0, 0.9, 0.9]]  # head 1
    return attn


def kl_columns(values: list[float]) -> np.ndarray:
    terms = np.zeros((len(values), 5))
    terms[:, KL_AT_T1] = values
    return terms


def test_the_kl_column_is_log_v_minus_the_entropy() -> None:
    # p = (1/2, 1/4, 1/4): H = 1.5 log 2, log V - H = log 3 - 1.5 log 2; uniform: 0; one-hot: log V
    got = chernoff_terms(torch.log(torch.tensor([[0.5, 0.25, 0.25], [1 / 3] * 3, [1.0, 0.0, 0.0]],
                                                dtype=torch.float64))).numpy()[:, KL_AT_T1]
    assert got == pytest.approx([math.log(3) - 1.5 * math.log(2), 0.0, math.log(3)], abs=1e-12)


def test_rauq_entropy_by_hand() -> None:
    v = view({Signal.TOKEN_CHERNOFF: [kl_columns([0.9, 0.5, 0.8])], Signal.TOKEN_ATTN_PREV: [attention()]})
    det = DETECTORS.get("rauq")(variant="entropy")
    assert det.params["alpha"] == 0.8 and det.signals() == {Signal.TOKEN_CHERNOFF, Signal.TOKEN_ATTN_PREV}
    # e = log V - H = (0.9, 0.5, 0.8), alpha = 0.8. layer 1, head 0: c = (0.9, 0.8*0.5 + 0.2*0.6*0.9 = 0.508,
    # 0.8*0.8 + 0.2*0.2*0.508 = 0.66032), u = -mean log c = 0.3992217; layer 2, head 1: c = (0.9, 0.562, 0.74116),
    # u = 0.3270509; the max: 0.3992217 (each c carries the authors' + 1e-10)
    assert det.score(v).values[0] == pytest.approx(0.3992217, abs=1e-7)
    # alpha = 1 ignores the attention: -mean log e
    assert DETECTORS.get("rauq")(variant="entropy", alpha=1.0).score(v).values[0] == pytest.approx(
        -np.log([0.9, 0.5, 0.8]).mean(), abs=1e-9)
    # a uniform next-token distribution (log V - H = 0, or a float rounding below it): log(1e-10), not NaN
    flat = view({Signal.TOKEN_CHERNOFF: [kl_columns([-1e-9])], Signal.TOKEN_ATTN_PREV: [attention()[..., :1]]}, 1)
    assert DETECTORS.get("rauq")(variant="entropy").score(flat).values[0] == pytest.approx(-math.log(1e-10))
    bad = view({Signal.TOKEN_CHERNOFF: [None, np.zeros((0, 5)), kl_columns([0.5, 0.5])],
                Signal.TOKEN_ATTN_PREV: [attention()] * 3})
    got = DETECTORS.get("rauq")(variant="entropy").score(bad)
    assert np.isnan(got.values).all()
    assert got.reasons == ["next-token distribution statistics (TOKEN_CHERNOFF) missing", "empty response",
                           "attention of shape (3, 2, 3) for 2 answer tokens"]


def test_rauq_identity_names_the_variant_and_the_resolved_alpha() -> None:
    default, entropy = DETECTORS.get("rauq")(), DETECTORS.get("rauq")(variant="entropy")
    assert default.identity()["variant"] == "probability" and default.params["alpha"] == 0.2
    assert entropy.identity()["variant"] == "entropy" and entropy.identity()["params"]["alpha"] == 0.8
    assert DETECTORS.get("rauq")(variant="entropy", alpha=0.2).identity() != entropy.identity()
    with pytest.raises(ValueError, match="variant"):
        DETECTORS.get("rauq")(variant="max")
