"""Every prompt a run sends is a packaged template that the run config's `templates:` replaces by name (inline text
or a file), with the replaced text in the cache key; the packaged wording keeps every key as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.judges.llm import load_judge_templates
from haldet.schema import Generation, Instance
from haldet.stages.auxiliary import SELF_EVAL_INSTRUCTION, VERBALIZED_INSTRUCTION, AuxiliaryStage
from haldet.stages.base import CellContext, Item
from haldet.store import CellStore
from haldet.text.prompts import PromptBuilder
from haldet.text.templates import PROMPT_TEMPLATES, packaged_template, template_text


def test_every_template_is_packaged_and_replaceable_inline_or_from_a_file(tmp_path: Path) -> None:
    for name, file in PROMPT_TEMPLATES.items():
        assert template_text(name) == packaged_template(file) and template_text(name).strip()
    mine = tmp_path / "self_eval.txt"
    mine.write_text("Right or wrong? Reply True or False.\n", encoding="utf-8")
    config = RunConfig.model_validate({"templates": {"verbalized": "Confidence 0-1?",
                                                     "self_eval": {"path": str(mine)}}})
    assert template_text("verbalized", config.templates) == "Confidence 0-1?"
    assert template_text("self_eval", config.templates) == "Right or wrong? Reply True or False.\n"
    with pytest.raises(HaldetError, match="unknown prompt template"):
        template_text("verbalized", {"verbalised": "typo"})
    with pytest.raises(HaldetError, match="cannot read prompt template 'self_eval'"):
        template_text("self_eval", RunConfig.model_validate(
            {"templates": {"self_eval": {"path": str(tmp_path / "missing.txt")}}}).templates)


class _Backend:
    def fingerprint(self) -> dict[str, Any]:
        return {"backend": "stub"}

    def shares_heads(self) -> bool:
        return False

    def thinks(self) -> bool:  # a model that answers directly (the follow-ups' 24-token budget)
        return False


def _aux(tmp_path: Path, templates: dict[str, Any]) -> tuple[AuxiliaryStage, Item]:
    ctx = CellContext(config=RunConfig.model_validate({"templates": templates}), dataset="d", model="m",
                      store=CellStore(tmp_path), backend_factory=_Backend)
    inst = Instance(id="d/test/1", dataset="d", scenario="qa_open", task_type="short_answer", question="Q?")
    gen = Generation(id=inst.id, prompt="p", response="A.", token_ids=[1], token_logprobs=[-0.1],
                     finish_reason="stop", n_tokens=1, model="m")
    return AuxiliaryStage(ctx), Item(instance=inst, prompt="p", generation=gen)


def test_follow_up_questions_come_from_the_templates_and_key_the_records(tmp_path: Path) -> None:
    default, item = _aux(tmp_path, {})
    assert default.questions() == (VERBALIZED_INSTRUCTION, SELF_EVAL_INSTRUCTION)
    assert VERBALIZED_INSTRUCTION.startswith("How likely is it that your answer above is correct?")
    custom, _ = _aux(tmp_path, {"self_eval": "Is the answer above right? Reply True or False."})
    assert custom.questions() == (VERBALIZED_INSTRUCTION, "Is the answer above right? Reply True or False.")
    assert custom.key(item) != default.key(item)
    # the packaged text given explicitly asks the same question, but is keyed as a replacement (never a clash)
    same, _ = _aux(tmp_path, {"self_eval": SELF_EVAL_INSTRUCTION})
    assert same.questions() == default.questions() and same.key(item) != default.key(item)


def test_answer_prompt_and_judge_templates_replaced_by_name() -> None:
    inst = Instance(id="d/test/1", dataset="d", scenario="qa_open", task_type="short_answer", question="Who?",
                    context="Doc.")
    custom = PromptBuilder(templates={"answer_user": "Q: {{ question }} | C: {{ context }}"})
    assert custom.user_message(inst) == "Q: Who? | C: Doc."
    assert custom.fingerprint() != PromptBuilder().fingerprint()  # the rendered prompt and its key change
    judge = load_judge_templates(None, {"judge_system": "Grade strictly."})
    assert judge["judge_system.txt"] == "Grade strictly."
    assert judge["judge_user.txt"] == packaged_template("judge_user.txt")
