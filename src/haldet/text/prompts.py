"""Prompt builder (paper appendix C.3): instance -> chat messages -> the model's rendered prompt text.

System prompt first, then optional few-shot demos as alternating user/assistant turns, then the target as a
user turn; the backend's chat template serialises them (a role-based format when the model has none). Task
routing (Context vs Document, options with an answer-letter instruction, default reasoning / code / tool-use
instructions, demo answers) comes from the template files `templates/prompt_user.j2` and
`templates/prompt_routing.yaml` (templates `answer_user` and `answer_routing`), which a user overrides with the run
config's `templates:` (inline text or a file) or with `PromptConfig.template_dir`.

The rendered prompt is stored with the item's generation and reused by every later stage, so greedy answers,
samples and features are all conditioned on exactly the same text.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import jinja2
import yaml

from haldet.config import PromptConfig, TokensConfig, digest
from haldet.errors import HaldetError, unknown_keys
from haldet.schema import Instance
from haldet.text.templates import override_text, packaged_template, template_folder, user_template

USER_TEMPLATE = "prompt_user.j2"
ROUTING_FILE = "prompt_routing.yaml"


class ChatRenderer(Protocol):
    def render_chat(self, messages: list[dict[str, str]]) -> str: ...


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class PromptTemplates:
    """The user-turn template and the routing table; a user's `template_dir` overrides file by file
    (the routing YAML is merged entry by entry)."""

    def __init__(self, template_dir: str | Path | None = None, overrides: dict[str, Any] | None = None) -> None:
        user_dir = template_folder(template_dir, what="prompt", option="prompt.template_dir",
                                   names=(USER_TEMPLATE, ROUTING_FILE))
        self.sources: dict[str, str] = {}
        configured = override_text("answer_user", overrides)
        user_text = configured if configured is not None else user_template(user_dir, USER_TEMPLATE)
        self.user_source = user_text if user_text is not None else packaged_template(USER_TEMPLATE)
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False,  # plain text, not HTML
                                 keep_trailing_newline=False)
        where = ("templates.answer_user" if configured is not None else
                 str(user_dir / USER_TEMPLATE) if user_text is not None and user_dir else f"packaged {USER_TEMPLATE}")
        try:
            self.user = env.from_string(self.user_source)
        except jinja2.TemplateSyntaxError as exc:
            raise HaldetError(f"prompt template syntax error: {exc.message}", where=f"{where}, line {exc.lineno}",
                              hint="fix the Jinja2 syntax") from None
        self.user_where = where
        routing = yaml.safe_load(packaged_template(ROUTING_FILE))
        configured_routing = override_text("answer_routing", overrides)
        override = configured_routing if configured_routing is not None else user_template(user_dir, ROUTING_FILE)
        if override is not None:
            path = ("templates.answer_routing" if configured_routing is not None
                    else str(Path(template_dir or ".") / ROUTING_FILE))
            try:
                loaded = yaml.safe_load(override) or {}
            except yaml.YAMLError:
                raise HaldetError("prompt routing file is not valid YAML", where=path,
                                  hint="fix the syntax; see the packaged prompt_routing.yaml") from None
            if not isinstance(loaded, dict):
                raise HaldetError("prompt routing file must hold a mapping", where=path)
            unknown = sorted(set(loaded) - set(routing))
            if unknown:
                raise HaldetError(unknown_keys("prompt routing entries", unknown, routing),
                                  where=path, hint=f"known: {', '.join(sorted(routing))}")
            routing = _merge(routing, loaded)
        self.routing: dict[str, Any] = routing

    def route(self, table: str, task_type: str) -> str:
        entries = self.routing.get(table) or {}
        value = entries.get(task_type, entries.get("default", ""))
        return str(value or "")

    def fingerprint(self) -> str:
        return digest([self.user_source, self.routing])


@lru_cache(maxsize=8)
def _load_templates(template_dir: str | None, overrides_json: str) -> PromptTemplates:
    return PromptTemplates(template_dir, json.loads(overrides_json))


def load_templates(template_dir: str | None = None, overrides: dict[str, Any] | None = None) -> PromptTemplates:
    """The answer-prompt templates (cached per folder and overrides)."""
    return _load_templates(template_dir, json.dumps(overrides or {}, sort_keys=True, default=_plain))


def _plain(obj: Any) -> Any:
    return obj.model_dump(mode="json") if hasattr(obj, "model_dump") else str(obj)


class PromptBuilder:
    """Instance (+ demos) -> chat messages -> rendered prompt, per `PromptConfig` and the run's `templates`."""

    def __init__(self, config: PromptConfig | None = None, templates: dict[str, Any] | None = None) -> None:
        self.config = config or PromptConfig.model_validate({})
        self.templates = load_templates(self.config.template_dir, templates)

    def user_message(self, instance: Instance) -> str:
        """The task fields rendered as one user turn: Instruction, Context/Document, Question, Options."""
        t = self.templates
        instruction = instance.instruction or t.route("default_instruction", instance.task_type)
        try:
            text = t.user.render(
                instruction=instruction.strip(), context=instance.context.strip(),
                question=instance.question.strip(),
                context_label=t.route("context_label", instance.task_type), options=instance.options,
                answer_instruction=t.route("answer_instruction", "mcq") if instance.options else "",
                task_type=instance.task_type, meta=instance.meta)
        except jinja2.TemplateError as exc:
            raise HaldetError(f"prompt template failed on item {instance.id}: {exc}", where=t.user_where) from None
        return text.strip()

    def demo_answer(self, demo: Instance) -> str:
        """A demo's assistant turn: one acceptable reference (with its worked solution for reasoning tasks),
        or an abstention-style answer when it has no reference."""
        if not demo.references:
            return str(demo.meta.get("abstain_reference") or self.templates.routing.get("demo_abstention", ""))
        fmt = self.templates.route("demo_answer", demo.task_type) or "{reference}"
        solution = str(demo.meta.get("solution") or "").strip()
        if "{solution}" in fmt and not solution:
            fmt = fmt.split("{solution}", 1)[1].lstrip("\n ") or "{reference}"
        return fmt.replace("{solution}", solution).replace("{reference}", demo.references[0]).strip()

    def messages(self, instance: Instance, demos: Sequence[Instance] = ()) -> list[dict[str, str]]:
        messages = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        for demo in demos:
            if demo.id == instance.id:
                raise ValueError(f"few-shot demo pool contains the target item {instance.id}")
            messages += [{"role": "user", "content": self.user_message(demo)},
                         {"role": "assistant", "content": self.demo_answer(demo)}]
        messages.append({"role": "user", "content": self.user_message(instance)})
        return messages

    def render(self, backend: ChatRenderer, instance: Instance, demos: Sequence[Instance] = ()) -> str:
        return backend.render_chat(self.messages(instance, demos))

    def fingerprint(self) -> str:
        return digest([self.config.model_dump(mode="json"), self.templates.fingerprint()])


def draw_demos(target: Instance, pool: Sequence[Instance], n: int, seed: int,
               exclude: set[str] | frozenset[str] = frozenset()) -> list[Instance]:
    """`n` demos for `target`, drawn with a seed from `pool` minus the target, every id in `exclude` (the
    evaluated items) and items of the target's `meta['group']` (same story/passage). The draw depends only on
    the seed, the target id and the pool, not on the order of calls, so a resumed run renders the same prompts."""
    if n <= 0:
        return []
    group = target.meta.get("group")  # e.g. a CoQA story: its other turns would show this turn's context/answers
    candidates = sorted((p for p in pool if p.id != target.id and p.id not in exclude
                         and (group is None or p.meta.get("group") != group)), key=lambda p: p.id)
    if len(candidates) < n:
        raise HaldetError(f"{n} few-shot demos asked for, but the demo pool holds only {len(candidates)} items",
                          where=f"prompt.n_shots (dataset {target.dataset})",
                          hint="lower prompt.n_shots, or lower --limit so rows remain beyond the evaluated ones")
    rng = random.Random(f"{seed}:{target.id}")
    return rng.sample(candidates, n)


def build_messages(instance: Instance, system_prompt: str, demos: list[Instance] | None = None) -> list[
    dict[str, str]
]:
    """Chat messages with the packaged templates (kept for callers that only have a system prompt)."""
    config = PromptConfig.model_validate({"system_prompt": system_prompt})
    return PromptBuilder(config).messages(instance, demos or [])


def demo_pool_size(n_shots: int) -> int:
    """Rows loaded past the evaluated limit to draw demos from (0 without few-shot)."""
    return max(32, 8 * n_shots) if n_shots > 0 else 0


def render_prompts(builder: PromptBuilder, backend: ChatRenderer, instances: Sequence[Instance],
                   pool: Sequence[Instance] = ()) -> list[str]:
    """Every evaluated item's prompt, with `builder.config.n_shots` seeded demos from `pool` (never an
    evaluated item)."""
    n, seed = builder.config.n_shots, builder.config.shot_seed
    evaluated = frozenset(inst.id for inst in instances)
    return [builder.render(backend, inst, draw_demos(inst, pool, n, seed, evaluated)) for inst in instances]


def given_response_prompts(tokens: TokensConfig, instances: Sequence[Instance], prompts: list[str]) -> list[str]:
    """Prompts of items whose response ships with the data, as `tokens.input_format` says: `raw` = the instance's
    own prompt text (instruction, context, question) and `tokens.separator`, with no template, so the proxy model
    reads exactly `prompt + response`; `chat` = the rendered chat prompt. Other items keep their prompt."""
    if tokens.input_format != "raw":
        return prompts
    return [
        "\n\n".join(part for part in (inst.instruction, inst.context, inst.question) if part) + tokens.separator
        if inst.response is not None else prompt
        for inst, prompt in zip(instances, prompts, strict=True)
    ]
