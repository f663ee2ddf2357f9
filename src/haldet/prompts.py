"""Prompt builder (paper appendix C.3): instance -> chat messages -> the model's rendered prompt text.

The rendered prompt is stored with the item's generation and reused by every later stage, so greedy answers,
samples and features are all conditioned on exactly the same text.
"""

from __future__ import annotations

from haldet.schema import Instance

MCQ_ANSWER = "Please strictly answer with the correct option letter(s)."
REASONING = "Please think step by step and provide the final answer at the end."
REASONING_TASKS = {"reasoning", "math", "science"}


def user_message(instance: Instance) -> str:
    """The task fields rendered as one user turn: Instruction, Context/Document, Question, Options."""
    parts: list[str] = []
    instruction = instance.instruction
    if not instruction and instance.task_type in REASONING_TASKS:
        instruction = REASONING
    if instruction:
        parts.append(f"Instruction: {instruction}")
    if instance.context:
        label = "Document" if instance.task_type == "summarization" else "Context"
        parts.append(f"{label}: {instance.context}")
    if instance.question:
        parts.append(f"Question: {instance.question}")
    if instance.options:
        parts.append("Options:\n" + "\n".join(f"{k}. {v}" for k, v in instance.options.items()))
        parts.append(MCQ_ANSWER)
    return "\n".join(parts)


def demo_answer(instance: Instance) -> str:
    """A few-shot demo's assistant turn: one acceptable reference, or an abstention when there is none."""
    return instance.references[0] if instance.references else "I don't know."


def build_messages(instance: Instance, system_prompt: str, demos: list[Instance] | None = None) -> list[
    dict[str, str]
]:
    messages = [{"role": "system", "content": system_prompt}]
    for demo in demos or []:
        if demo.id == instance.id:
            raise ValueError(f"few-shot demo pool contains the target item {instance.id}")
        messages += [{"role": "user", "content": user_message(demo)},
                     {"role": "assistant", "content": demo_answer(demo)}]
    messages.append({"role": "user", "content": user_message(instance)})
    return messages
