"""Auxiliary prompts on a thinking target (haldet.stages.auxiliary): the follow-up replies get the reasoning reply
budget, the reply's thinking block is split off before the number or decision word is read (a reply cut off inside
it has no answer, with the setting to raise), and a self-evaluation P(True) read at the first reply token is refused
(before the run where the thinking is declared, before the first question otherwise), the evaluator procedure
reading the decision after the reasoning instead. Target: the tiny reasoning model (tests/tiny_thinking.py), whose
greedy reply to anything is `<think> the capital of australia is sydney </think> canberra .`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from haldet.backends.base import GenOutput
from haldet.backends.select import check_self_eval_thinking, make_backend
from haldet.config import RunConfig
from haldet.errors import HaldetError, SignalUnavailableError
from haldet.schema import Generation, Instance
from haldet.signals import Signal
from haldet.stages.aux_evaluator import self_eval_fields
from haldet.stages.auxiliary import AuxiliaryStage, _answer_only, reply_answer
from haldet.stages.base import CellContext, Item
from haldet.store import CellStore
from haldet.text.confidence import confidence_complete
from haldet.text.reasoning import Markers
from tiny_thinking import build_tiny_thinking

PROMPT = "user : what is the capital of australia ? assistant :"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_thinking(tmp_path_factory.mktemp("thinking"))


def _stage(tmp: Path, model: Path, **aux: Any) -> AuxiliaryStage:
    cfg = RunConfig.model_validate({"device": "cpu", "auxiliary": aux})
    backend = make_backend(str(model), cfg)
    return AuxiliaryStage(CellContext(config=cfg, dataset="toy", model=str(model), store=CellStore(tmp),
                                      backend_factory=lambda: backend))


def _items() -> list[Item]:
    inst = Instance(id="toy/test/0", dataset="toy", scenario="qa_open", task_type="short_answer",
                    question="what is the capital of australia ?", references=["canberra"])
    return [Item(instance=inst, prompt=PROMPT, generation=Generation(
        id=inst.id, prompt=PROMPT, response="canberra .", token_ids=[14, 15], token_logprobs=[-0.1, -0.1],
        finish_reason="stop", n_tokens=2, model="m"))]


def test_follow_ups_of_a_thinking_target_get_the_reasoning_budget_and_read_the_answer(tmp_path: Path,
                                                                                      model: Path) -> None:
    stage = _stage(tmp_path, model, self_eval=False)
    assert stage.ctx.backend.thinks() and stage.reply_budget() == 4096  # as every role asking a reasoning model
    assert _stage(tmp_path, model, self_eval=False, max_new_tokens=7).reply_budget() == 7  # a set budget is used
    [rec] = stage.compute(_items())
    assert rec["verbalized"] == "canberra ." and "sydney" not in rec["verbalized"]  # the thinking split off
    assert "verbalized_no_answer" not in rec
    # a budget that ends inside the thinking block: no answer, with the setting to raise, never a number
    [cut] = _stage(tmp_path, model, self_eval=False, max_new_tokens=4).compute(_items())
    assert cut["verbalized"] is None and cut["verbalized_value"] is None
    assert cut["verbalized_no_answer"].startswith("no answer") and "auxiliary.max_new_tokens" in cut[
        "verbalized_no_answer"]
    # the reply stops at its first stated number in the answer, never at one in the reasoning
    done = stage.until()
    assert confidence_complete("hmm 0.2. hmm") and not done("hmm 0.2. hmm") and done("hmm 0.2. </think> 0.9. I")
    # a target that answers directly keeps its 24 tokens (and its keys)
    plain = RunConfig.model_validate({"device": "cpu", "reasoning": {"split": "off"}})
    assert plain.auxiliary.reply_budget(False) == 24 and plain.auxiliary.evaluator_budget(False) == 512


def test_self_evaluation_p_true_on_a_thinking_target_is_refused(tmp_path: Path, model: Path) -> None:
    with pytest.raises(HaldetError) as err:
        _stage(tmp_path, model).compute(_items())
    assert err.value.where == "auxiliary.procedure" and "auxiliary.procedure: evaluator" in err.value.hint
    assert "thinks before it replies" in str(err.value)
    # declared thinking (an endpoint's params, local markers) is refused before the run
    requires = {"self_eval": frozenset({Signal.SELF_EVAL})}
    for declared in ({"models": ["openai:r1"], "endpoint": {"params": {"reasoning": True}}},
                     {"models": ["tiny"], "reasoning": {"split": "markers"}}):
        with pytest.raises(SignalUnavailableError, match="self_eval: self-evaluation reads P"):
            check_self_eval_thinking(RunConfig.model_validate(declared), requires)
        check_self_eval_thinking(RunConfig.model_validate({**declared, "auxiliary": {"procedure": "evaluator"}}),
                                 requires)  # the evaluator's reading runs
    check_self_eval_thinking(RunConfig.model_validate({"models": ["openai:gpt"]}), requires)  # no thinking: runs


def test_the_evaluator_procedure_reads_after_the_reasoning(tmp_path: Path, model: Path) -> None:
    stage = _stage(tmp_path, model, procedure="evaluator")
    [rec] = stage.compute(_items())
    assert rec["self_eval_text"] == "canberra ." and rec["decision"] is None  # no decision word in its answer
    assert rec["verbalized"] == "canberra ." and rec["p_true"] is None
    # an endpoint's reply with the thinking inline: the decision and the number are read after it
    think = Markers("<think>", "</think>")
    inline = GenOutput(text="<think>is it correct? 0.2 maybe</think> Incorrect. Confidence: 0.9", token_ids=[],
                       token_logprobs=[], finish_reason="stop", extra={"tokens": ["<think>", "is"]})
    text, why = reply_answer(inline, think)
    assert (text, why) == ("Incorrect. Confidence: 0.9", None)
    fields = self_eval_fields(stage.ctx.backend, _answer_only(inline, text))
    assert fields["decision"] == "incorrect" and fields["logp_decision"] is None  # no misaligned token log-prob
    cut = GenOutput(text="<think>it is correct, 0.8", token_ids=[], token_logprobs=[], finish_reason="length")
    text, why = reply_answer(cut, think)
    assert text == "" and why.startswith("no answer") and "auxiliary.max_new_tokens" in why
