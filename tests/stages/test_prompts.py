"""Prompt builder: the rendered user turn per task type (appendix C.3 routing), chat serialisation (role-based
fallback and a real chat template), few-shot demos drawn away from evaluated items, template overrides, and the
cell flow rendering prompts with demos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from haldet.backends.base import Backend, role_based_chat
from haldet.config import PromptConfig, RunConfig
from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.schema import Instance
from haldet.text.prompts import PromptBuilder, _load_templates, draw_demos, render_prompts
from repo_paths import FIXTURES

FIX = FIXTURES / "datasets"
SYSTEM = "You are a helpful, accurate, and honest AI assistant."


def item(name: str, native: str | None = None, **params: Any) -> Instance:
    data_dir = None if name.startswith("halueval") or name == "humaneval" else FIX
    instances, _ = get_adapter(name, data_dir, params).load(limit=None if native else 1)
    if native is None:
        return instances[0]
    return next(i for i in instances if i.id.endswith(f"/{native}"))


@pytest.fixture(scope="module")
def builder() -> PromptBuilder:
    return PromptBuilder()


class RoleChat(Backend):
    kind = "test"

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        return role_based_chat(messages)


# --- rendered prompt per task type ---------------------------------------------------------------------
def test_mcq_options_with_letters_and_answer_letter_instruction(builder: PromptBuilder) -> None:
    text = builder.user_message(item("arc_challenge", "NYSEDREGENTS_2015_8_12"))
    assert text == (
        "Instruction: Choose the option that best answers this grade-school science question.\n"
        "Question: What is the main source of energy for Earth's water cycle?\n"
        "Options:\nA. the Moon\nB. wind\nC. the Sun\nD. volcanoes\n"
        "Reply with the letter of the correct option only (several letters, comma-separated, if more than one "
        "is correct).")


def test_grounded_qa_uses_context_label(builder: PromptBuilder) -> None:
    inst = item("squad_v2", "sq1")
    text = builder.user_message(inst)
    assert text.splitlines()[1] == f"Context: {inst.context}"
    assert text.splitlines()[2] == "Question: Into which sea does the Nile empty?"
    assert "Options" not in text


def test_summarization_uses_document_label(builder: PromptBuilder) -> None:
    inst = item("xsum", "3001")
    assert builder.user_message(inst) == (f"Document: {inst.context}\n"
                                          "Question: Summarize the document above in a single sentence.")


def test_math_and_science_get_reasoning_instructions(builder: PromptBuilder) -> None:
    gsm = builder.user_message(item("gsm8k"))
    assert gsm.startswith("Instruction: Solve the problem step by step.") and "'Answer:'" in gsm
    thm = builder.user_message(item("theoremqa", "1"))
    assert thm.startswith("Instruction: Apply the relevant theorem and reason step by step.")
    # without an adapter instruction, the task-type routing supplies one
    bare = Instance(id="x/test/1", dataset="x", scenario="math", task_type="reasoning", question="What is 2+2?")
    assert builder.user_message(bare) == ("Instruction: Work through the problem step by step, then give the final "
                                          "answer on the last line after 'Answer:'.\nQuestion: What is 2+2?")


def test_code_and_tool_use_prompts(builder: PromptBuilder) -> None:
    humaneval = builder.user_message(item("humaneval"))
    assert humaneval.startswith("Instruction: Complete the Python function") and "Question: " in humaneval
    mbpp = builder.user_message(item("mbpp", "11"))
    assert "Context: Tests:\nassert add_two(1, 2) == 3" in mbpp and "Python code only" in mbpp
    xlam = builder.user_message(item("xlam", "7"))
    assert "Context: Available tools:\n{" in xlam and '"name" and "arguments"' in xlam
    assert xlam.endswith("Question: What is the weather in Paris today?")
    bare = Instance(id="x/test/1", dataset="x", scenario="agent", task_type="tool_call", context="tools", question="q")
    assert builder.user_message(bare).startswith("Instruction: Pick the right tool from the context")


def test_dialogue_multilingual_and_rag_prompts(builder: PromptBuilder) -> None:
    coqa = builder.user_message(item("coqa", "0_2"))
    assert "Conversation so far:\nQ: What did Tom have?\nA: a kite\nQuestion: What colour was it?" in coqa
    bele = builder.user_message(item("belebele", languages=["fra_Latn"]))
    assert "Context: La rivière" in bele and "B. Dans les collines du nord" in bele
    rag = builder.user_message(item("ragtruth", "101"))
    assert rag.startswith("Instruction: Answer the question using only the passages")
    assert "Question: how long do tomato seeds take to sprout" in rag


# --- chat serialisation -----------------------------------------------------------------------------------
def test_role_based_fallback_serialisation(builder: PromptBuilder) -> None:
    inst = item("xsum", "3001")
    prompt = builder.render(RoleChat("t"), inst)
    assert prompt == f"System: {SYSTEM}\n\nUser: {builder.user_message(inst)}\n\nAssistant:"


def test_real_chat_template_of_the_embedded_model(builder: PromptBuilder) -> None:
    from haldet.backends.hf.backend import HFBackend

    backend = HFBackend("smollm2-135m")
    inst = item("arc_challenge", "Mercury_7001")
    prompt = builder.render(backend, inst)
    assert backend.has_chat_template
    assert prompt.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n")
    assert builder.user_message(inst) in prompt and prompt.endswith("<|im_start|>assistant\n")


# --- few-shot demos ---------------------------------------------------------------------------------------
def test_demo_answers_reference_solution_or_abstention(builder: PromptBuilder) -> None:
    assert builder.demo_answer(item("arc_challenge", "NYSEDREGENTS_2015_8_12")) == "C"
    gsm = next(i for i in get_adapter("gsm8k", FIX).load()[0] if i.references == ["10"])
    assert builder.demo_answer(gsm) == "She had 3*4=12 apples.\nAfter eating 2 she has 12-2=10.\nAnswer: 10"
    svamp = item("svamp", "chal-1")  # no worked solution: just the answer line
    assert builder.demo_answer(svamp) == "Answer: 5"
    assert builder.demo_answer(item("squad_v2", "sq2")) == "The context does not contain the answer."
    bare = Instance(id="x/test/1", dataset="x", scenario="qa_open", task_type="short_answer", question="q")
    assert builder.demo_answer(bare) == "I don't know."


def test_demos_never_include_target_or_evaluated_items_and_are_seeded() -> None:
    pool, _ = get_adapter("halueval_qa").load(limit=40)
    evaluated, rest = pool[:10], pool[10:]
    target = evaluated[0]
    demos = draw_demos(target, pool, 5, seed=42, exclude={i.id for i in evaluated})
    assert len(demos) == 5 and not {d.id for d in demos} & {i.id for i in evaluated}
    assert [d.id for d in demos] == [d.id for d in draw_demos(target, list(reversed(pool)), 5, 42,
                                                               {i.id for i in evaluated})]
    assert [d.id for d in demos] != [d.id for d in draw_demos(target, pool, 5, 7, {i.id for i in evaluated})]
    with pytest.raises(HaldetError, match="demo pool holds only 30"):
        draw_demos(target, rest, 31, seed=1)


def test_few_shot_messages_alternate_user_and_assistant(builder: PromptBuilder) -> None:
    insts, _ = get_adapter("arc_challenge", FIX).load()
    target, demos = insts[0], insts[1:]
    messages = builder.messages(target, demos)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[2]["content"] == demos[0].references[0] and messages[-1]["content"] == builder.user_message(target)
    with pytest.raises(ValueError, match="target item"):
        builder.messages(target, [target])


# --- template files ---------------------------------------------------------------------------------------
def test_user_template_dir_overrides_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "prompt_routing.yaml").write_text("context_label:\n  summarization: Article\n")
    custom = PromptBuilder(PromptConfig(template_dir=str(tmp_path)))
    inst = item("xsum", "3001")
    assert custom.user_message(inst).startswith("Article: The museum")
    assert "Context: " in custom.user_message(item("squad_v2", "sq1"))  # other entries keep the packaged value
    (tmp_path / "prompt_user.j2").write_text("[{{ task_type }}] {{ question }}")
    _load_templates.cache_clear()
    custom = PromptBuilder(PromptConfig(template_dir=str(tmp_path)))
    assert custom.user_message(inst) == "[summarization] Summarize the document above in a single sentence."
    assert custom.templates.fingerprint() != PromptBuilder().templates.fingerprint()


def test_bad_template_inputs_are_clear_errors(tmp_path: Path) -> None:
    _load_templates.cache_clear()
    with pytest.raises(HaldetError, match="template directory not found"):
        PromptBuilder(PromptConfig(template_dir=str(tmp_path / "missing")))
    (tmp_path / "prompt_user.j2").write_text("{% if question %}oops\n")
    with pytest.raises(HaldetError) as err:
        PromptBuilder(PromptConfig(template_dir=str(tmp_path)))
    assert "prompt_user.j2" in err.value.message and "line" in err.value.message
    (tmp_path / "prompt_user.j2").unlink()
    (tmp_path / "prompt_routing.yaml").write_text("context_labels: {}\n")
    _load_templates.cache_clear()
    with pytest.raises(HaldetError, match="unknown prompt routing entries context_labels"):
        PromptBuilder(PromptConfig(template_dir=str(tmp_path)))
    _load_templates.cache_clear()


# --- the cell flow --------------------------------------------------------------------------------------
def test_the_cell_flow_renders_demos_from_rows_past_the_evaluated_limit(tmp_path: Path) -> None:
    from haldet.flow.cell import prepare_cell
    from haldet.store import RunStore

    config = RunConfig(datasets=["halueval_qa"], models=["role"], limit=6,
                       prompt=PromptConfig(n_shots=2, shot_seed=3))
    backends: dict[str, Backend] = {"role": RoleChat("role")}
    result, _, items = prepare_cell(config, RunStore(tmp_path / "run"), "halueval_qa", "role",
                                    lambda d, t: (lambda n: None), backends)
    assert len(items) == 6 and result.data["n_demo_pool"] == 32
    evaluated = [i.instance for i in items]
    pool = get_adapter("halueval_qa").load(limit=38)[0][6:]
    for it in items:
        assert it.prompt.count("\n\nUser: ") == 3 and it.prompt.count("\n\nAssistant: ") == 2
        for other in evaluated:  # no evaluated item appears as a demo
            assert other.question.strip() not in it.prompt or other.id == it.id
        assert sum(p.question.strip() in it.prompt for p in pool) == 2
    again = render_prompts(PromptBuilder(config.prompt), RoleChat("role"), evaluated, pool)
    assert again == [it.prompt for it in items]  # same seed, same prompts (a resumed run reuses its cache)
    zero = RunConfig(datasets=["halueval_qa"], models=["role"], limit=6)
    _, _, plain = prepare_cell(zero, RunStore(tmp_path / "run0"), "halueval_qa", "role",
                               lambda d, t: (lambda n: None), backends)
    assert all(p.prompt.count("User: ") == 1 for p in plain)


def test_demos_skip_items_of_the_same_story() -> None:
    turns, _ = get_adapter("coqa", FIX).load()
    other = Instance(id="coqa/validation/9_1", dataset="coqa", scenario="qa_dialogue", task_type="dialogue",
                     question="q", references=["a"], meta={"group": "story-9"})
    target = turns[0]
    assert draw_demos(target, [*turns, other], 1, seed=0) == [other]  # never a turn of the target's own story
    with pytest.raises(HaldetError, match="holds only 1"):
        draw_demos(target, [*turns, other], 2, seed=0)


ALL = ["arc_challenge", "commonsenseqa", "triviaqa", "truthfulqa", "squad_v2", "hotpotqa", "coqa", "halueval_qa",
       "halueval_dialogue", "halueval_summarization", "ragtruth", "xsum", "gsm8k", "svamp", "theoremqa",
       "humaneval", "mbpp", "xlam", "belebele"]


@pytest.mark.parametrize("name", ALL)
def test_every_dataset_renders_its_fields_in_order(builder: PromptBuilder, name: str) -> None:
    inst = item(name)
    text = builder.user_message(inst)
    label = "Document" if inst.task_type == "summarization" else "Context"
    parts = [f"Instruction: {inst.instruction.strip()}" if inst.instruction else None,
             f"{label}: {inst.context.strip()}" if inst.context else None,
             f"Question: {inst.question.strip()}" if inst.question else None,
             "Options:\n" + "\n".join(f"{k}. {v}" for k, v in inst.options.items()) if inst.options else None]
    expected = "\n".join(p for p in parts if p)
    if inst.options:
        expected += "\nReply with the letter of the correct option only"
    assert text.startswith(expected)
    assert ("Reply with the letter" in text) == bool(inst.options)
    if inst.references and inst.task_type in ("short_answer", "span", "multi_hop", "grounded_qa"):
        assert inst.references[0] not in text.split("Question:")[-1]  # the answer is never in the question
