"""Claim-level P(True) (the `claim_p_true` stage and the `p_true_claims` detector) and LUQ: hand-computed scores,
the stage's P(True) equal to a direct forward pass of a real (tiny) model, mismatched units never scored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from haldet.schema import Category, Generation, Instance, SpanLabel
from haldet.signals import Signal, SignalView
from haldet.suites.longform import selfcheck_claims
from haldet.suites.longform.luq import LUQ
from haldet.suites.longform.p_true_claims import PTrueClaims

ANSWER = "Ada Lovelace was born in London. Her father was Lord Tennyson."


def _instance(item_id: str = "d/test/ada") -> Instance:
    units = [SpanLabel(start=0, end=32, text=ANSWER[:32], kind="claim", category=Category.CORRECT,
                       meta={"claim": "Ada Lovelace was born in London."}),
             SpanLabel(start=33, end=len(ANSWER), text=ANSWER[33:], kind="claim", category=Category.HALLUCINATION)]
    return Instance(id=item_id, dataset="d", scenario="longform", task_type="long_form",
                    question="Tell me a bio of Ada Lovelace.", response=ANSWER, units=units)


def _view(instances: list[Instance], values: dict[Signal, list[Any]]) -> SignalView:
    gens = [Generation(id=i.id, prompt="p", response=i.response or "", token_ids=[], token_logprobs=[],
                       finish_reason="provided", n_tokens=0, model="m") for i in instances]
    return SignalView(ids=[i.id for i in instances], instances=[i.without_labels() for i in instances],
                      generations=gens, loader=lambda signal, ids: values[signal])


def test_p_true_claims_is_one_minus_the_models_p_true() -> None:
    asked = {"claim": [{"start": 0, "end": 32, "p_true": 0.9}, {"start": 33, "end": len(ANSWER), "p_true": 0.25}]}
    other = {"claim": [{"start": 0, "end": 10, "p_true": 0.9}, {"start": 33, "end": len(ANSWER), "p_true": 0.25}]}
    failed = {"claim": [{"start": 0, "end": 32, "p_true": None}, {"start": 33, "end": len(ANSWER), "p_true": 0.5}]}
    insts = [_instance(f"d/test/{k}") for k in range(4)]
    view = _view(insts, {Signal.CLAIM_P_TRUE: [asked, other, failed, None]})
    det = PTrueClaims()
    units = det.score_units(view, "claim")
    assert units.values[0] == pytest.approx([0.1, 0.75])
    assert np.isnan(units.values[1]).all() and units.reasons[1][0] == "P(True) was asked about other units than these"
    assert np.isnan(units.values[2][0]) and units.values[2][1] == pytest.approx(0.5)
    assert units.reasons[2][0] == "the reply gave no True/False probability"
    assert units.reasons[3] == ["no claim P(True) record for this answer"] * 2
    flat = det.score(view)
    assert flat.values[0] == pytest.approx(0.425) and flat.values[2] == pytest.approx(0.5)  # mean of the finite
    assert np.isnan(flat.values[3]) and flat.reasons[3] == "no claim P(True) record for this answer"
    assert flat.values[1] == pytest.approx(0.425)  # the response reads the asked claims, whatever the units


# P(entailment, neutral, contradiction) per (sample, claim): sample 0 entails claim 1 and is neutral on claim 2,
# sample 1 contradicts both
NLI = {("s0", ANSWER[:32]): [0.8, 0.1, 0.1], ("s0", "Her father was Lord Tennyson."): [0.2, 0.7, 0.1],
       ("s1", ANSWER[:32]): [0.1, 0.1, 0.8], ("s1", "Her father was Lord Tennyson."): [0.1, 0.2, 0.7]}


@pytest.mark.parametrize(("support", "expected"), [
    # two_way: 1 - mean(e / (e + c)); claim 1: 1 - (0.8/0.9 + 0.1/0.9)/2; claim 2: 1 - (0.2/0.3 + 0.1/0.8)/2
    ("two_way", [1 - (0.8 / 0.9 + 0.1 / 0.9) / 2, 1 - (0.2 / 0.3 + 0.1 / 0.8) / 2]),
    # entail: 1 - mean(e); claim 1: 1 - (0.8 + 0.1)/2; claim 2: 1 - (0.2 + 0.1)/2
    ("entail", [1 - 0.45, 1 - 0.15])])
def test_luq_is_one_minus_the_mean_support(monkeypatch: pytest.MonkeyPatch, support: str,
                                           expected: list[float]) -> None:
    monkeypatch.setattr(selfcheck_claims, "pair_scores", lambda det, kind, param, pairs, label: np.array(
        [NLI[(p, h)] for p, h in pairs], dtype=float))
    inst = _instance()
    view = _view([inst], {Signal.SAMPLES: [["s0", "s1", " "]], Signal.RESPONSE: [ANSWER]})
    det = LUQ(support=support, unit="claim")
    assert det.score_units(view, "claim").values[0] == pytest.approx(expected)
    assert det.score(view).values[0] == pytest.approx(np.mean(expected))  # LUQ-Atomic: 1 - mean support
    # the default reads the answer's sentences (LUQ): here the same two spans
    assert LUQ(support=support).score(view).values[0] == pytest.approx(np.mean(expected))
    with pytest.raises(ValueError, match="no support 'both'"):
        LUQ(support="both")


def test_claim_p_true_stage_equals_a_direct_forward_pass(tmp_path: Path, tiny_smol_llama: Path) -> None:
    import torch

    from haldet.backends.hf.backend import HFBackend
    from haldet.config import RunConfig
    from haldet.stages.auxiliary import answer_candidates
    from haldet.stages.base import CellContext, Item
    from haldet.stages.claim_p_true import ClaimPTrueStage
    from haldet.store import CellStore

    backend = HFBackend(str(tiny_smol_llama), device="cpu")
    inst = _instance()
    prompt = backend.render_chat([{"role": "user", "content": inst.question}])
    gen = Generation(id=inst.id, prompt=prompt, response=ANSWER, token_ids=[], token_logprobs=[],
                     finish_reason="provided", n_tokens=0, model="tiny")
    item = Item(instance=inst, prompt=prompt, generation=gen)
    ctx = CellContext(config=RunConfig(), dataset="d", model="tiny", store=CellStore(tmp_path),
                      backend_factory=lambda: backend)
    rec = ClaimPTrueStage(ctx).ensure([item])[inst.id]
    true_ids, false_ids = answer_candidates(backend)
    got = [u["p_true"] for u in rec["units"]["claim"]]
    for claim, p in zip(["Ada Lovelace was born in London.", ANSWER[33:]], got, strict=True):
        question = f"Here is one statement taken from your answer above:\n{claim}\nIs this statement true? " \
                   "Reply True or False."
        ids = backend.encode_prompt(backend.follow_up(prompt, ANSWER, question))
        with torch.inference_mode():
            probs = torch.softmax(backend.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
        t, f = float(probs[true_ids].sum()), float(probs[false_ids].sum())
        assert p == pytest.approx(t / (t + f), abs=1e-4)
    assert rec["n_calls"] == 2 and [(u["start"], u["end"]) for u in rec["units"]["claim"]] == [(0, 32), (33, 62)]
    # the detector reads the record through the loader: 1 - P(True) per claim
    view = _view([inst], {Signal.CLAIM_P_TRUE: [rec["units"]]})
    assert PTrueClaims().score_units(view, "claim").values[0] == pytest.approx([1 - p for p in got])
