"""The evaluator procedure of the auxiliary stage (OpenHalDet appendix E.1-E.3, `auxiliary.procedure: evaluator`):
a separate evaluator chat per query, a reply that may reason first, the self-evaluation decision's log-prob read at
the token where the final Correct/Incorrect starts, and the `self_eval` detector's `decision` variants."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from test_detectors_blackbox import make_view

from haldet.backends.base import GenOutput
from haldet.backends.openai_backend import OpenAIBackend
from haldet.config import EndpointConfig, RunConfig
from haldet.detectors.self_eval import SelfEval
from haldet.detectors.verbalized import Verbalized
from haldet.schema import Generation, Instance
from haldet.signals import Signal
from haldet.stages.aux_evaluator import decision_logprob, evaluator_chat, find_decision
from haldet.stages.auxiliary import AuxiliaryStage
from haldet.stages.base import CellContext, Item
from haldet.stages.loader import _value
from haldet.store import CellStore
from mock_openai import FakeOpenAI

PRESET_AUX = {"procedure": "evaluator", "evaluator_max_new_tokens": 64}


def _items() -> list[Item]:
    rows = [("What is the capital of France?", "Paris."), ("Who wrote Hamlet?", "Charles Dickens wrote it.")]
    items = []
    for i, (q, a) in enumerate(rows):
        inst = Instance(id=f"toy/test/{i}", dataset="toy", scenario="qa_open", task_type="short_answer", question=q,
                        references=["x"])
        items.append(Item(instance=inst, prompt=f"PROMPT {i}", generation=Generation(
            id=inst.id, prompt=f"PROMPT {i}", response=a, token_ids=[1], token_logprobs=[-0.1], finish_reason="stop",
            n_tokens=1, model="m")))
    return items


def _ctx(tmp_path: Path, backend: Any, **aux: Any) -> CellContext:
    config = RunConfig.model_validate({"auxiliary": {**PRESET_AUX, **aux}})
    return CellContext(config=config, dataset="toy", model="m", store=CellStore(tmp_path),
                       backend_factory=lambda: backend)


def test_evaluator_chat_is_a_separate_chat_with_the_papers_fields() -> None:
    chat = evaluator_chat("self_eval", "Question: Who wrote Hamlet?", "Dickens.", None)
    assert [m["role"] for m in chat] == ["system", "user"]  # no answered conversation: a chat of its own
    assert "Correct or Incorrect" in chat[0]["content"]
    user = chat[1]["content"]
    assert user.startswith("Question: Question: Who wrote Hamlet?\nProposed Answer: Dickens.\n")
    assert user.endswith("(Correct/Incorrect):")
    verbal = evaluator_chat("verbalized", "Q", "A", None)
    assert "0.0 to 1.0" in verbal[0]["content"] and verbal[1]["content"].startswith("Question: Q\nProposed Answer: A")
    # a run's `templates:` replaces the wording (keyed by the text)
    assert evaluator_chat("verbalized", "Q", "A", {"evaluator_verbalized_system": "S"})[0]["content"] == "S"


def test_find_decision_takes_the_last_decision_word() -> None:
    assert find_decision("Not correct at all. Incorrect") == ("incorrect", 20)
    assert find_decision("It seemed incorrect at first, but it is Correct.") == ("correct", 40)
    assert find_decision("True") is None and find_decision(None) is None


def _reply(arg: str, body: dict[str, Any], j: int) -> str:
    system = body["messages"][0]["content"]
    wrong = "Dickens" in body["messages"][-1]["content"]
    if "Correct or Incorrect" in system:
        return "Dickens did not write it. Incorrect" if wrong else "It is right. Correct"
    return "I think 0.2" if wrong else "Confidence: 0.85"


def test_evaluator_procedure_end_to_end_through_an_endpoint(tmp_path: Path) -> None:
    with FakeOpenAI(content=_reply, default="ok:") as srv:
        backend = OpenAIBackend("openai:mock", EndpointConfig(base_url=srv.base_url, retries=0, timeout=10.0))
        stage = AuxiliaryStage(_ctx(tmp_path, backend))
        assert not stage.reads_in_decoding() and not stage.paired()
        records = stage.compute(_items())
        bodies = list(srv.requests)
    # four separate chats (2 items x 2 queries): system + user, the task as the target saw it and the answer
    assert len(bodies) == 4 and all([m["role"] for m in b["messages"]] == ["system", "user"] for b in bodies)
    users = [b["messages"][1]["content"] for b in bodies]
    assert any("What is the capital of France?" in u and "Proposed Answer: Paris." in u for u in users)
    assert all(b["max_tokens"] == 64 for b in bodies)
    right, wrong = records
    assert right["procedure"] == "evaluator" and right["verbalized_value"] == pytest.approx(0.85)
    assert wrong["verbalized"] == "I think 0.2" and wrong["verbalized_value"] == pytest.approx(0.2)
    # the mock's tokens are whitespace-led words, token i with log p = -(i + 1) / 10: the decision is word 3 / 5
    # (counted from 0)
    assert right["decision"] == "correct" and right["logp_decision"] == pytest.approx(-0.4)
    assert wrong["decision"] == "incorrect" and wrong["logp_decision"] == pytest.approx(-0.6)
    values = [_value(Signal.SELF_EVAL, r) for r in records]
    view = make_view(["Paris.", "Dickens."], {Signal.SELF_EVAL: values,
                                               Signal.VERBALIZED: [r["verbalized"] for r in records]})
    signed = SelfEval(variant="decision").score(view).values
    assert signed == pytest.approx([1 - math.exp(-0.4), math.exp(-0.6)])  # P(True) = 1 - p after Incorrect
    literal = SelfEval(variant="decision_literal").score(view).values
    assert literal == pytest.approx([1 - math.exp(-0.4), 1 - math.exp(-0.6)])  # p read as P(True) word for word
    assert Verbalized(variant="paper").score(view).values == pytest.approx([0.15, 0.8])


def test_decision_variants_refuse_follow_up_records_and_fall_back_to_the_decision() -> None:
    follow_up = {"p_true": 0.9, "logp_true": -0.1, "text": "True", "procedure": "follow_up", "decision": None,
                 "logp_decision": None}
    no_lp = {**follow_up, "procedure": "evaluator", "text": "... Incorrect", "decision": "incorrect"}
    none = {**no_lp, "decision": None, "text": "I cannot tell."}
    view = make_view(["a", "b", "c"], {Signal.SELF_EVAL: [follow_up, no_lp, none]})
    scores = SelfEval(variant="decision").score(view)
    assert math.isnan(scores.values[0]) and "auxiliary.procedure: evaluator" in scores.reasons[0]
    assert scores.values[1] == 1.0  # no log-prob: the decision itself (Incorrect -> 1)
    assert math.isnan(scores.values[2]) and "no Correct/Incorrect" in scores.reasons[2]
    strict = SelfEval(variant="decision", text_fallback=False).score(make_view(["b"], {Signal.SELF_EVAL: [no_lp]}))
    assert math.isnan(strict.values[0]) and "text fallback disabled" in strict.reasons[0]


def test_decision_token_on_a_real_tokenizer(tiny_smol_llama: Path) -> None:
    """The decision's token is found through the model's own token offsets (SmolLM2's tokenizer)."""
    from haldet.backends.hf.backend import HFBackend

    backend = HFBackend(str(tiny_smol_llama), device="cpu")
    text = "The proposed answer names the wrong author. Incorrect"
    ids = backend.encode_text(text)
    logprobs = [-(i + 1) / 100 for i in range(len(ids))]
    out = GenOutput(text=text, token_ids=ids, token_logprobs=logprobs, finish_reason="stop")
    # independently: the token whose decoded prefix first reaches past the word's start
    start = text.rindex("Incorrect")
    k = next(i for i in range(len(ids)) if len(backend.tokenizer.decode(ids[: i + 1])) > start)
    assert decision_logprob(backend, out, start) == pytest.approx(logprobs[k])


@pytest.mark.slow
def test_evaluator_stage_on_a_local_model(tmp_path: Path, tiny_smol_llama: Path, monkeypatch) -> None:
    """A local model answers the evaluator chats rendered with its own chat template (system turn first)."""
    from haldet.backends.hf.backend import HFBackend

    backend = HFBackend(str(tiny_smol_llama), device="cpu")
    seen: list[str] = []
    generate = backend.generate

    def spy(prompts: list[str], **kw: Any) -> list[GenOutput]:
        seen.extend(prompts)
        return generate(prompts, **kw)

    monkeypatch.setattr(backend, "generate", spy)
    records = AuxiliaryStage(_ctx(tmp_path, backend, evaluator_max_new_tokens=6)).compute(_items())
    assert len(seen) == 4 and all(p.startswith("<|im_start|>system\nYou ") for p in seen)
    assert all("Proposed Answer:" in p and "PROMPT" not in p for p in seen)  # not the answered chat
    for rec in records:
        assert rec["procedure"] == "evaluator" and 0 < rec["verbalized_n_tokens"] <= 6
        assert rec["self_eval_n_tokens"] <= 6 and (rec["decision"] is None) == (rec["logp_decision"] is None)
