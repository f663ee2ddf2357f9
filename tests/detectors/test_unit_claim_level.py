"""Focus, CCP and unit_SAR at claim level: a claim's score is the aggregate of its tokens' scores, the tokens chosen
by the claim's character offsets. One tiny answer (10 tokens, two claims), the auxiliary models replaced by fixed
numbers (NLI classes, sentence similarities, IDF, keywords), every expected value computed by hand from the
method's formula; a control shows that a claim shifted by one character (taking in the next token) scores
differently, so the tests see which tokens were aggregated."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from haldet.detectors import ccp as ccp_module
from haldet.detectors import focus as focus_module
from haldet.detectors import unit_sar as unit_sar_module
from haldet.detectors.ccp import CCP
from haldet.detectors.focus import Focus
from haldet.detectors.unit_sar import UnitSAR
from haldet.models import idf_corpus as idf_module  # Focus reaches the table through its focus_table
from haldet.models.idf import IDFTable
from haldet.schema import Category, Generation, Instance, SpanLabel
from haldet.signals import Signal, SignalView

ANSWER = "Ada was born in London. She wrote notes."
TOKENS = ["Ada", " was", " born", " in", " London", ".", " She", " wrote", " notes", "."]
OFFSETS = np.array([(0, 3), (3, 7), (7, 12), (12, 15), (15, 22), (22, 23), (23, 27), (27, 33), (33, 39), (39, 40)])
# claim A "born in London" (8..22): tokens 2, 3, 4; claim B "She wrote notes" (24..39): tokens 6, 7, 8
CLAIMS = [(8, 22), (24, 39)]
TOKENS_OF = [[2, 3, 4], [6, 7, 8]]
SHIFTED = [(9, 23), (25, 40)]  # one character later: each claim also overlaps the "." after it (tokens 5, 9)
P_OBS = [0.9, 0.8, 0.5, 0.6, 0.2, 0.95, 0.7, 0.4, 0.3, 0.9]  # p of each observed token


def _view(claims: list[tuple[int, int]], signals: dict[Signal, Any]) -> SignalView:
    units = [SpanLabel(start=s, end=e, text=ANSWER[s:e], kind="claim", category=Category.CORRECT)
             for s, e in claims]
    inst = Instance(id="d/test/ada", dataset="d", scenario="longform", task_type="long_form", question="q",
                    response=ANSWER, units=units)
    gen = Generation(id=inst.id, prompt="p", response=ANSWER, token_ids=list(range(10)),
                     token_logprobs=list(np.log(P_OBS)), finish_reason="provided", n_tokens=10, model="tok")
    values = {Signal.TOKEN_OFFSETS: [OFFSETS], Signal.RESPONSE: [ANSWER], **signals}
    return SignalView(ids=[inst.id], instances=[inst.without_labels()], generations=[gen],
                      loader=lambda signal, ids: values[signal])


def _check(det: Any, signals: dict[Signal, Any], token_values: list[float], how: str = "mean") -> None:
    """The detector's claim scores equal `how` over each claim's tokens of the hand-computed token values; the
    claims shifted by one character take in the next token (the "." after each) and, averaged, score otherwise."""
    agg = {"mean": np.mean, "max": np.max}[how]
    expected = [agg([token_values[t] for t in index]) for index in TOKENS_OF]
    got = det.score_units(_view(CLAIMS, signals), "claim")
    assert got.values[0] == pytest.approx(expected, rel=1e-9) and got.reasons[0] == ["", ""]
    shifted = det.score_units(_view(SHIFTED, signals), "claim").values[0]
    assert shifted == pytest.approx([agg([token_values[t] for t in [*index, index[-1] + 1]]) for index in TOKENS_OF])
    if how == "mean":  # (a max may not move: the "." tokens score low)
        assert not np.allclose(shifted, expected)


def test_unit_sar_claim_scores_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # similarity of the answer with and without each token: relevance R = 1 - g, normalised by its sum (2.73)
    g = [0.9, 0.95, 0.6, 0.8, 0.3, 0.99, 0.85, 0.5, 0.4, 0.98]
    monkeypatch.setattr(unit_sar_module, "pair_scores", lambda det, kind, param, pairs, label: np.array(
        [[g[t]] for t in range(len(pairs))]))
    relevance = [1 - x for x in g]
    assert sum(relevance) == pytest.approx(2.73)
    y = [-math.log(p) * r / 2.73 for p, r in zip(P_OBS, relevance, strict=True)]  # y_i = -log p_i * R_i / sum R
    # claim A by hand: (-ln 0.5 * 0.4 - ln 0.6 * 0.2 - ln 0.2 * 0.7) / 2.73 / 3 = 0.17114...
    assert np.mean([y[2], y[3], y[4]]) == pytest.approx(
        (-math.log(0.5) * 0.4 - math.log(0.6) * 0.2 - math.log(0.2) * 0.7) / 2.73 / 3)
    signals = {Signal.TOKEN_LOGPROBS: [np.log(P_OBS)]}
    _check(UnitSAR(scope="response"), signals, y)
    _check(UnitSAR(scope="response", aggregate="max"), signals, y, "max")


class _Tokenizer:
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return TOKENS[ids[0]] if ids[0] < 10 else f" alt{ids[0]}"


def test_ccp_claim_scores_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # two alternatives per token (ids 100 + 2t, 101 + 2t) with probabilities p1, p2 and NLI classes
    p1 = [0.05, 0.1, 0.3, 0.2, 0.5, 0.02, 0.2, 0.3, 0.4, 0.05]
    p2 = [0.03, 0.05, 0.1, 0.1, 0.2, 0.01, 0.05, 0.2, 0.2, 0.02]
    cls1 = "ECCENCECNE"  # entailment / contradiction / neutral of alternative 1 of each token
    cls2 = "NCNECCNENC"
    rows = {"E": [0.8, 0.1, 0.1], "N": [0.1, 0.8, 0.1], "C": [0.1, 0.1, 0.8]}  # argmax -> the class

    class _Cache:
        def scores(self, model: Any, pairs: list[tuple[str, str]], bar: Any) -> np.ndarray:
            out = []
            for premise, _ in pairs:
                alt = int(premise.rsplit("alt", 1)[1]) - 100
                out.append(rows[(cls1 if alt % 2 == 0 else cls2)[alt // 2]])
            return np.array(out)

    monkeypatch.setattr(ccp_module, "pair_model", lambda *a, **k: "nli-stand-in")
    monkeypatch.setattr(ccp_module, "cache_for", lambda det: _Cache())
    monkeypatch.setattr(ccp_module, "load_tokenizer", lambda name: _Tokenizer())
    ids = np.array([[t, 100 + 2 * t, 101 + 2 * t] for t in range(10)])
    lps = np.log(np.array([P_OBS, p1, p2]).T)

    def y(t: int) -> float:  # -log(entailed mass / (entailed + contradicted mass)); the observed token entails
        num = P_OBS[t] + sum(p[t] for p, c in ((p1, cls1), (p2, cls2)) if c[t] == "E")
        den = P_OBS[t] + sum(p[t] for p, c in ((p1, cls1), (p2, cls2)) if c[t] in "EC")
        return -math.log(num / den)

    values = [y(t) for t in range(10)]
    # claim A by hand: token 2: 0.5 / (0.5 + 0.3) (alt 1 contradicts, alt 2 neutral); token 3: (0.6 + 0.2 + 0.1) /
    # (0.6 + 0.2 + 0.1) = 1 (both entail); token 4: 0.2 / (0.2 + 0.2) (alt 1 neutral, alt 2 contradicts)
    assert np.mean(values[2:5]) == pytest.approx((-math.log(0.5 / 0.8) - math.log(1.0) - math.log(0.5)) / 3)
    signals = {Signal.TOKEN_TOPK_IDS: [ids], Signal.TOKEN_TOPK_LOGPROBS: [lps]}
    _check(CCP(context="response"), signals, values)
    # lm-polygraph's claim-level CCP: -prod_i exp(-y_i) over the claim's tokens = minus the product of their
    # entailed shares; claim A: -(0.625 * 1 * 0.5)
    got = CCP(context="response", aggregate="claim").score_units(_view(CLAIMS, signals), "claim").values[0]
    assert got[0] == pytest.approx(-(0.625 * 1.0 * 0.5))
    assert got[1] == pytest.approx(-math.exp(-sum(values[6:9])))


def test_focus_claim_scores_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    keywords = np.array([1, 0, 0, 0, 1, 0, 0, 0, 1, 0], dtype=bool)  # Ada, London, notes
    idf = np.full(200, math.log(100 / 10))  # alternatives: df 9 of 100 documents -> ln 10
    idf[:10] = math.log(100)                # observed tokens: df 0 -> ln 100
    monkeypatch.setattr(focus_module, "analyse", lambda texts: [[] for _ in texts])
    monkeypatch.setattr(focus_module, "pipeline_id", lambda: "stand-in")
    monkeypatch.setattr(focus_module, "token_mask", lambda words, offsets, pos, entity_types: keywords)
    monkeypatch.setattr(idf_module, "idf_table", lambda name, corpus: IDFTable(
        df=np.where(np.arange(200) < 10, 0.0, 9.0), documents=100))
    p_alt = [0.05, 0.1, 0.3, 0.005, 0.5, 0.02, 0.2, 0.3, 0.4, 0.05]  # token 3's alternative is below 0.01
    ids = np.array([[t, 100 + t] for t in range(10)])
    lps = np.log(np.array([P_OBS, p_alt]).T)
    att = np.zeros((10, 10))
    att[4, 0], att[4, 2] = 0.3, 0.5   # London attends to Ada (a keyword) and "born" (not one)
    att[8, 0], att[8, 4] = 0.2, 0.6   # notes attends to Ada and London

    def h(t: int) -> float:  # -ln p_hat(x_t) + 2 ** H_2(p_hat), p_hat ~ p * idf over x_t and alternatives >= 0.01
        w = [P_OBS[t] * math.log(100)] + ([p_alt[t] * math.log(10)] if p_alt[t] >= 0.01 else [])
        q = [x / sum(w) for x in w]
        return -math.log(q[0] + 1e-10) + 2 ** -sum(x * math.log2(x) for x in q)

    u0 = h(0)
    u4 = h(4) + 0.9 * (0.3 / (0.3 + 1e-6)) * u0                      # only the earlier keyword Ada propagates
    u8 = h(8) + 0.9 * (0.2 * u0 + 0.6 * u4) / (0.2 + 0.6 + 1e-6)     # from Ada and London, renormalised
    values = [u0, 0, 0, 0, u4, 0, 0, 0, u8, 0]                        # non-keywords masked to 0
    assert h(3) == pytest.approx(1.0)  # its only alternative is under the threshold: p_hat = (1): -ln 1 + 2 ** 0
    signals = {Signal.TOKEN_TOPK_IDS: [ids], Signal.TOKEN_TOPK_LOGPROBS: [lps], Signal.TOKEN_ATTENTION: [att]}
    _check(Focus(), signals, values)
    _check(Focus(aggregate="max"), signals, values, "max")
