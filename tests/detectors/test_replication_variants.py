"""The papers' settings added as detector variants (docs/replication.md), each on a hand-computed case:
VeriGray's claim-level CCP with tau = -0.001, LLM-Check's fixed thresholds (learned or fixed direction), and the
2-class NLI checkpoint SelfCheckGPT ships (TRIVIA+)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from haldet.detectors.ccp import CCP, claim_score
from haldet.detectors.llmcheck import LLMCheckAttention, LLMCheckHidden
from haldet.errors import HaldetError
from haldet.models.pairs.entailment import HFEntailment
from haldet.suites.verigray.suite import detector_output


def test_claim_ccp_is_minus_the_product_of_entailed_shares() -> None:
    # token CCP y_i = -log(entailed share): shares 0.5 and 0.002 -> claim score -(0.5 * 0.002) = -0.001
    shares = np.array([0.5, 0.002])
    assert claim_score(-np.log(shares)) == pytest.approx(-0.001)
    ccp = CCP(aggregate="claim", threshold=-0.001)
    assert ccp.combine(-np.log(np.array([0.9, 0.8]))) == pytest.approx(-0.72)
    assert CCP().combine(-np.log(shares)) == pytest.approx(np.mean(-np.log(shares)))  # default: mean unchanged


def test_fixed_tau_gives_ccps_own_verdict_unfaithful_above_it() -> None:
    ccp = CCP(aggregate="claim", threshold=-0.001)
    # -0.0005: shares multiply to 0.0005 < 0.001 -> Unfaithful; -0.5 and exactly tau -> Faithful; NaN stays NaN
    out = detector_output("ccp", np.array([-0.0005, -0.5, -0.001, np.nan]), ccp)
    assert out.binary is not None
    assert out.binary[:3].tolist() == [1.0, 0.0, 0.0] and math.isnan(out.binary[3])
    assert detector_output("ccp", np.array([-0.0005]), CCP(aggregate="claim")).binary is None  # validation picks
    with pytest.raises(ValueError, match="aggregate must be one of"):
        CCP(aggregate="product")
    with pytest.raises(ValueError, match="threshold must be a number"):
        CCP(threshold="-0.001")


def test_llmcheck_fixed_threshold_and_direction_on_the_raw_scale() -> None:
    table = np.array([[0.0, 0.0, 0.0], [5.0, 7.0, 6.3]])  # [layers, units + 1]: raw hidden scores at layer 1
    below = LLMCheckHidden(layer=1, threshold=6.3, direction="below")
    below.fit(None, None)  # type: ignore[arg-type]  # a fixed layer and direction learn nothing from labels
    signed, why = below.signed(table, [0, 1, 2])
    assert why == "" and signed.tolist() == [-5.0, -7.0, -6.3] and below.decision_threshold == -6.3
    # raw 5 < 6.3 -> hallucinated; 7 and 6.3 (not below) -> not
    assert detector_output("x", signed, below).binary.tolist() == [1.0, 0.0, 0.0]  # type: ignore[union-attr]
    above = LLMCheckAttention(layer=1, threshold=6.3, direction="above")
    above.fit(None, None)  # type: ignore[arg-type]
    assert detector_output("x", above.signed(table, [0, 1, 2])[0], above).binary.tolist() == [0.0, 1.0, 0.0]  # type: ignore[union-attr]
    learned = LLMCheckHidden(layer=1, threshold=6.3)  # direction learned on labels: the threshold follows the sign
    learned.layer, learned.sign = 1, -1.0
    assert learned.decision_threshold == -6.3 and LLMCheckHidden(layer=1).decision_threshold is None
    with pytest.raises(ValueError, match="needs a fixed layer"):
        LLMCheckHidden(direction="below", threshold=6.3)
    with pytest.raises(ValueError, match="direction must be one of"):
        LLMCheckAttention(layer=1, direction="up")


def test_selfcheckgpt_two_class_checkpoint_maps_its_generic_labels() -> None:
    generic = {0: "LABEL_0", 1: "LABEL_1"}
    # SelfCheckGPT's DeBERTa-v3-large MNLI head: 0 entailment, 1 contradiction, no neutral column
    assert HFEntailment._label_index(generic, "potsawee/deberta-v3-large-mnli") == [0, None, 1]
    assert HFEntailment._label_index(generic, "/models/deberta-v3-large-mnli") == [0, None, 1]  # a local copy
    assert HFEntailment._label_index({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}, "x") == [0, 1, 2]
    with pytest.raises(HaldetError, match="not entailment/neutral/contradiction"):
        HFEntailment._label_index(generic, "someone/unknown-2-class")  # never guessed for an unknown model
