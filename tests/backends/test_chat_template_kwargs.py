"""`chat_template_kwargs` reach the hf tokenizer's chat template (the embedded tokenizer with a template that reads
the argument, as Qwen3's reads `enable_thinking`) and the model fingerprint; the endpoint side is in
tests/backends/test_backend_openai.py."""

from __future__ import annotations

import copy

from haldet.backends.select import make_backend
from haldet.config import RunConfig

THINKING_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
    "<think></think>{% else %}<think>{% endif %}{% endif %}"
)


def test_chat_template_kwargs_reach_apply_chat_template_and_the_fingerprint() -> None:
    off = make_backend("smollm2-135m", RunConfig(chat_template_kwargs={"enable_thinking": False}))
    off.tokenizer.chat_template = THINKING_TEMPLATE
    plain = copy.copy(off)  # the same tokenizer (one load), without the arguments
    plain.chat_template_kwargs = {}
    messages = [{"role": "user", "content": "Capital of France?"}]
    assert plain.render_chat(messages) == "<|user|>Capital of France?\n<|assistant|><think>"
    assert off.render_chat(messages) == "<|user|>Capital of France?\n<|assistant|><think></think>"
    assert "chat_template_kwargs" not in plain.fingerprint()  # the default keys every record as before
    assert off.fingerprint() == {**plain.fingerprint(), "chat_template_kwargs": {"enable_thinking": False}}
