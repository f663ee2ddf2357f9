"""The OpenHalDet judge prompt (appendix D) as a named variant (`judge.prompt: paper`), selected by the preset:
the paper's rules and fields, the three calibration examples before the item, without haldet's extra rules."""

from __future__ import annotations

import json

from haldet.flow.layers import load_config
from haldet.judges.llm import JudgePrompts, LLMJudge, load_judge_templates
from haldet.schema import Generation, Instance
from mock_openai import FakeOpenAI

# haldet's own additions to the paper's instructions (the `haldet` variant keeps them)
EXTRA_RULES = ("do not use your own opinion", "declining counts as correct")


def _pair() -> tuple[Instance, Generation]:
    inst = Instance(id="t/test/0", dataset="t", scenario="qa_open", task_type="short_answer",
                    question="Who wrote Hamlet?",
                    context="Hamlet is a tragedy.", instruction="Answer briefly.", references=["William Shakespeare"],
                    incorrect=["Christopher Marlowe"])
    return inst, Generation(id=inst.id, prompt="p", response="Marlowe wrote it.", token_ids=[], token_logprobs=[],
                            finish_reason="stop", n_tokens=0, model="m")


def _check_paper_structure(messages: list[dict[str, str]]) -> None:
    system, *turns = messages
    assert system["role"] == "system"
    rules = [line for line in system["content"].splitlines() if line[:2] in ("1.", "2.", "3.")]
    assert len(rules) == 3 and [r.rsplit(" ", 1)[-1] for r in rules] == ["correct.", "hallucination.", "abstention."]
    assert not any(extra in system["content"] for extra in EXTRA_RULES)
    assert '"reasoning"' in system["content"] and '"category"' in system["content"]
    # three calibration examples of the three kinds, as earlier turns, then the item
    assert [t["role"] for t in turns] == ["user", "assistant"] * 3 + ["user"]
    assert [json.loads(t["content"])["category"] for t in turns[1:6:2]] == ["correct", "hallucination", "abstention"]
    item = turns[-1]["content"].splitlines()
    assert [line.split(":", 1)[0] for line in item] == ["Context", "Question", "Acceptable Truths", "Known Traps",
                                                        "Model answer"]
    assert item[2] == 'Acceptable Truths: ["William Shakespeare"]' and item[3] == 'Known Traps: ["Christopher Marlowe"]'


def test_paper_variant_has_the_papers_structure_and_haldets_keeps_its_rules() -> None:
    inst, gen = _pair()
    _check_paper_structure(JudgePrompts(load_judge_templates(None, None, "paper")).messages(inst, gen))
    ours = JudgePrompts(load_judge_templates(None)).messages(inst, gen)
    assert all(extra in ours[0]["content"] for extra in EXTRA_RULES)  # the named variant `haldet` (the default)
    assert ours[-1]["content"].startswith("Task: Answer briefly.")


def test_the_preset_asks_the_judge_with_the_papers_structure() -> None:
    judge = load_config(None, preset="openhaldet").judge  # the resolved run config, as `haldet run` gets it
    assert (judge.kind, judge.model, judge.prompt, judge.few_shot) == ("llm", "gpt-4o-mini", "paper", True)
    with FakeOpenAI() as srv:
        config = judge.model_copy(update={"model": "judge-test", "base_url": srv.base_url, "retries": 0})
        llm = LLMJudge(config)
        labels = []
        llm.judge_many([_pair()], lambda i, v: labels.append(v))
        body = srv.requests[-1]
    assert labels[0].category == "correct"  # what the mock answered
    _check_paper_structure(body["messages"])
    assert body["temperature"] == 0 and body["seed"] == 0  # deterministic decoding
    assert LLMJudge(config.model_copy(update={"prompt": "haldet"})).fingerprint() != llm.fingerprint()
