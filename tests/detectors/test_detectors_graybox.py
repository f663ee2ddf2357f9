"""Hand-computed values of the gray-box baselines added beside MSP (issue 43): Renyi divergence and Fisher-Rao distance
to uniform (from TOKEN_CHERNOFF), pointwise mutual information and its conditional form, and RAUQ; each formula and
its edge cases on small inputs worked out by hand in the comments."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from haldet.backends.hf.distribution import chernoff_terms
from haldet.detectors.base import DETECTORS
from haldet.detectors.rauq import middle_layers
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView


def view(values: dict[Signal, list[Any]], logprobs: list[list[float]] | None = None) -> SignalView:
    n = len(next(iter(values.values())))
    lps = logprobs or [[-0.1]] * n
    ids = [f"t/test/{i}" for i in range(n)]
    inst = [Instance(id=i, dataset="t", scenario="qa_open", task_type="short_answer", question="q") for i in ids]
    gens = [Generation(id=i, prompt="p", response="r", token_ids=list(range(len(lp))), token_logprobs=lp,
                       finish_reason="stop", n_tokens=len(lp), model="m") for i, lp in zip(ids, lps, strict=True)]
    return SignalView(ids=ids, instances=inst, generations=gens, loader=lambda s, wanted: [values[s][ids.index(i)]
                                                                                          for i in wanted])


def chernoff(*dists: list[float]) -> np.ndarray:
    """TOKEN_CHERNOFF of these distributions, through the same function the passes use."""
    return chernoff_terms(torch.log(torch.tensor(dists, dtype=torch.float64))).numpy()


def test_chernoff_terms_by_hand() -> None:
    # p = (1/2, 1/4, 1/4), V = 3: c(1/2) = log((sqrt(1/2) + 2 sqrt(1/4)) / sqrt(3)) = log 0.98559856
    # c(1/4) = log((2^-1/4 + 2 * 4^-1/4) * 3^-3/4); uniform: every coefficient is 1 (log 0)
    got = chernoff([0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3])
    assert got[0, 1] == pytest.approx(math.log(0.98559856), abs=1e-8)
    assert got[0, 0] == pytest.approx(math.log((0.5 ** 0.25 + 2 * 0.25 ** 0.25) * 3 ** -0.75), abs=1e-12)
    assert np.allclose(got[1], 0.0, atol=1e-12)


def test_renyi_and_fisher_rao_by_hand() -> None:
    renyi_t1 = DETECTORS.get("renyi_divergence")(temperature=1.0)
    fr_t1 = DETECTORS.get("fisher_rao")(temperature=1.0)
    v = view({Signal.TOKEN_CHERNOFF: [chernoff([0.5, 0.25, 0.25]), chernoff([1 / 3] * 3, [1 / 3] * 3),
                                      chernoff([1 - 2e-20, 1e-20, 1e-20])]})
    # T = 1, alpha = 1/2: D = -2 log BC, BC = 0.98559856 -> 0.0290123; FR = (2/pi) arccos(BC) = 0.1081734
    # uniform: 0 and 0; one-hot: D = log 3, FR = (2/pi) arccos(1/sqrt 3) = 0.6081734
    assert renyi_t1.score(v).values == pytest.approx([-0.0290123, 0.0, -math.log(3)], abs=1e-6)
    assert fr_t1.score(v).values == pytest.approx([-0.1081734, 0.0, -(2 / math.pi) * math.acos(3 ** -0.5)], abs=1e-5)
    # T = 2 (the default): q = sqrt(p) / sum sqrt(p) = (0.41421, 0.29289, 0.29289); BC(q, u) = 0.99649874
    # D = -2 log BC = 0.0070148, FR = (2/pi) arccos(BC) = 0.0532885
    two = view({Signal.TOKEN_CHERNOFF: [chernoff([0.5, 0.25, 0.25])]})
    assert DETECTORS.get("renyi_divergence")().score(two).values[0] == pytest.approx(-0.0070148, abs=1e-6)
    assert DETECTORS.get("fisher_rao")().score(two).values[0] == pytest.approx(-0.0532885, abs=1e-6)
    # the mean over tokens: the uniform token adds 0, so two tokens halve the first one's distance
    both = view({Signal.TOKEN_CHERNOFF: [chernoff([0.5, 0.25, 0.25], [1 / 3] * 3)]})
    assert fr_t1.score(both).values[0] == pytest.approx(-0.1081734 / 2, abs=1e-5)


def test_renyi_and_fisher_rao_refuse_what_the_signal_cannot_give() -> None:
    with pytest.raises(ValueError, match="alpha"):
        DETECTORS.get("renyi_divergence")(alpha=0.0)
    with pytest.raises(ValueError, match="KL limit"):
        DETECTORS.get("renyi_divergence")(alpha=1.0, temperature=3.0)
    with pytest.raises(ValueError, match="exponent"):
        DETECTORS.get("renyi_divergence")(alpha=0.7)  # needs sum p^0.35
    with pytest.raises(ValueError, match="exponent"):
        DETECTORS.get("fisher_rao")(temperature=3.0)
    assert DETECTORS.get("renyi_divergence")(alpha=2.0, temperature=2.0)  # sum p^1 and sum p^0.5
    v = view({Signal.TOKEN_CHERNOFF: [None, np.zeros((0, 5)), np.array([[np.nan, 0.0, 0.0, 0.0, 0.0]])]})
    got = DETECTORS.get("fisher_rao")().score(v)
    assert np.isnan(got.values).all()
    assert got.reasons == ["next-token distribution statistics (TOKEN_CHERNOFF) missing", "empty response",
                           "non-finite next-token distribution statistic"]


def test_pmi_and_cpmi_by_hand() -> None:
    lp = [[-1.0, -2.0, -0.5]]
    values = {Signal.TOKEN_LOGPROBS: [np.array(lp[0])], Signal.ANSWER_LM_LOGPROBS: [np.array([-3.0, -2.5, -4.0])],
              Signal.TOKEN_ENTROPIES: [np.array([1.0, 0.01, 0.5])]}
    v = view(values, lp)
    # PMI terms with the first token's unconditional part left out: (-1, -2 + 2.5, -0.5 + 4) = (-1, 0.5, 3.5)
    assert DETECTORS.get("pmi")().score(v).values[0] == pytest.approx(-1.0)
    # all three: (2, 0.5, 3.5), mean 2
    assert DETECTORS.get("pmi")(skip_first=False).score(v).values[0] == pytest.approx(-2.0)
    # CPMI: H = (1, 0.01, 0.5) >= 0.0656 only at tokens 1 (skipped) and 3:
    # (-1, -2, -0.5 + 3.599 * 4 = 13.896), mean 3.632
    assert DETECTORS.get("cpmi")().score(v).values[0] == pytest.approx(-3.632)
    # without skipping the first: (-1 + 3 * 3.599 = 9.797, -2, 13.896), mean 7.231
    assert DETECTORS.get("cpmi")(skip_first=False).score(v).values[0] == pytest.approx(-7.231)
    # tau above every entropy: CPMI is the mean log-likelihood
    assert DETECTORS.get("cpmi")(tau=2.0).score(v).values[0] == pytest.approx(3.5 / 3)
    bad = view({Signal.TOKEN_LOGPROBS: [np.array([-1.0, -2.0]), np.array([-1.0])],
                Signal.ANSWER_LM_LOGPROBS: [np.array([-1.0]), None], Signal.TOKEN_ENTROPIES: [None, None]},
               [[-1.0, -2.0], [-1.0]])
    got = DETECTORS.get("pmi")().score(bad)
    assert np.isnan(got.values).all()
    assert got.reasons[0] == "1 unconditional log-probabilities for 2 answer tokens"
    assert "missing" in got.reasons[1]


def test_rauq_by_hand() -> None:
    p = np.log([0.9, 0.5, 0.8])
    attn = np.zeros((3, 2, 3))  # [layer, head, token]; column 0 is never read
    attn[0] = [[0, 0.01, 0.01], [0, 0.01, 0.01]]  # outside the middle third of 3 layers (layers 1 and 2)
    attn[1] = [[0, 0.6, 0.2], [0, 0.1, 0.5]]  # head 0 (mean 0.4 > 0.3)
    attn[2] = [[0, 0.1, 0.1], [0, 0.9, 0.9]]  # head 1
    v = view({Signal.TOKEN_LOGPROBS: [p], Signal.TOKEN_ATTN_PREV: [attn]}, [list(p)])
    # alpha = 0.2. layer 1: c = (0.9, 0.2*0.5 + 0.8*0.6*0.9 = 0.532, 0.2*0.8 + 0.8*0.2*0.532 = 0.24512),
    # u = -mean log c = 0.7141599; layer 2: c = (0.9, 0.748, 0.69856), u = 0.2514823; max = 0.7141599
    assert middle_layers(3) == [1, 2] and middle_layers(30) == list(range(10, 21))
    assert DETECTORS.get("rauq")().score(v).values[0] == pytest.approx(0.7141599, abs=1e-7)
    # layer 0 joins with "all": c = (0.9, 0.1072, 0.1608576), u = 1.3885518
    assert DETECTORS.get("rauq")(layers="all").score(v).values[0] == pytest.approx(1.3885518, abs=1e-7)
    # alpha = 1: the attention is ignored, every layer gives -mean log p
    assert DETECTORS.get("rauq")(alpha=1.0).score(v).values[0] == pytest.approx(-p.mean())
    # one token: c = p(y_1) whatever the attention
    one = view({Signal.TOKEN_LOGPROBS: [p[:1]], Signal.TOKEN_ATTN_PREV: [attn[..., :1]]}, [[float(p[0])]])
    assert DETECTORS.get("rauq")().score(one).values[0] == pytest.approx(-math.log(0.9))
    short = view({Signal.TOKEN_LOGPROBS: [p], Signal.TOKEN_ATTN_PREV: [attn[..., :2]]}, [list(p)])
    assert DETECTORS.get("rauq")().score(short).reasons[0] == "attention of shape (3, 2, 2) for 3 answer tokens"
    with pytest.raises(ValueError, match="layers"):
        DETECTORS.get("rauq")(layers="first")
