"""What the `verdict` stage asks: registered classification prompts (`VerdictPrompt`, `register_prompt`,
`get_prompt`), the few-shot `Example`s shown with them, and the `Ask` a prompted detector declares (which prompt,
how many demonstrations, whether its instructions are optimised). Detectors and suites register their prompts
here on import; the stage (`haldet.stages.verdict`) asks them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from haldet.config import digest
from haldet.errors import HaldetError
from haldet.schema import Instance, SpanLabel
from haldet.stages.prompt_optimizer import Optimize


@dataclass(frozen=True)
class Example:
    """A labelled demonstration for a few-shot prompt: the item, its answer and its (training) label."""

    instance: Instance
    response: str
    label: str


@dataclass(frozen=True)
class VerdictPrompt:
    """A classification prompt: `messages(instance, response, examples, unit, texts)` builds the chat (`unit` is the
    unit asked about at a unit level, else None; `texts` the prompt's `templates` by name, as the run config's
    `templates:` gives them or packaged), `parse(reply)` returns (label, "") with a label of `labels`, or (None, why)
    when the reply states none; `scores` maps labels to a detector score (higher = more likely hallucinated). Bump
    `version` when the packaged wording or parsing changes (it is in the key; replaced texts are keyed themselves).
    With `follow`, the chat goes on: each reply is appended as the assistant's turn and `follow`'s text as the next
    user turn, until `follow` returns None (at most `max_turns` replies); every reply is recorded."""

    name: str
    version: str
    labels: tuple[str, ...]
    scores: dict[str, float]
    messages: Callable[[Instance, str, Sequence[Example], SpanLabel | None, Mapping[str, str]], list[dict[str, str]]]
    parse: Callable[[str], tuple[str | None, str]]
    max_new_tokens: int = 384
    level: str = "response"
    templates: tuple[str, ...] = ()  # names in haldet.text.templates.PROMPT_TEMPLATES
    # the template of `templates` holding the instructions a prompt optimiser may rewrite ("" = not optimisable)
    instructions: str = ""
    # a dialogue of several turns (as a model trained on one reads it, e.g. ANAH-v2's three): given the item, the
    # answer, the unit, the texts and the replies so far, the next user turn, or None when the last reply is the
    # one `parse` reads; None here = one turn
    follow: Callable[[Instance, str, SpanLabel | None, Mapping[str, str], Sequence[str]], str | None] | None = None
    max_turns: int = 4


PROMPTS: dict[str, VerdictPrompt] = {}

# `Instance.meta` key of the article as fitted to the judge's own window (`verdict.context_window`), set by a suite
# that fits long contexts (TRIVIA+); absent, the judge reads `Instance.context` as the detectors' model does
JUDGE_CONTEXT = "judge_context"


def judge_view(instance: Instance) -> Instance:
    """The item as the judge reads it: its context replaced by the judge's own fit when a suite made one."""
    own = instance.meta.get(JUDGE_CONTEXT)
    return instance if own is None else instance.model_copy(update={"context": own})


def judge_context_key(instance: Instance) -> list[str]:
    """The digest of the judge's own context for a verdict key ([] when the judge reads the detectors' context,
    which the rendered prompt in the key already covers: those keys stay as they were)."""
    own = instance.meta.get(JUDGE_CONTEXT)
    return [] if own is None else [digest(["judge_context", own])]


def register_prompt(prompt: VerdictPrompt) -> VerdictPrompt:
    PROMPTS[prompt.name] = prompt
    return prompt


def get_prompt(name: str) -> VerdictPrompt:
    if name not in PROMPTS:
        raise HaldetError(f"unknown verdict prompt {name!r}", where="detector_params",
                          hint=f"registered prompts: {', '.join(sorted(PROMPTS)) or '(none)'}")
    return PROMPTS[name]


@dataclass(frozen=True)
class Ask:
    """One prompt asked of every item: `shots` > 0 adds that many misclassified validation examples; `optimize`
    rewrites the prompt's instructions on training mistakes first (`haldet.stages.prompt_optimizer`)."""

    prompt: str
    shots: int = 0
    seed: int = 42
    optimize: Optimize | None = None

    @property
    def name(self) -> str:
        name = self.prompt if not self.shots else f"{self.prompt}@{self.shots}shot"
        if self.optimize is not None:  # the settings in the name: two optimised judges never share records
            name += "+po" if self.optimize == Optimize() else f"+po-{digest(asdict(self.optimize))[:8]}"
        return name

    def check(self) -> VerdictPrompt:
        """The prompt, after checking the ask fits it (few-shot demonstrations and prompt optimisation exist at
        response level only, the latter for prompts that name their instructions)."""
        prompt = get_prompt(self.prompt)
        if (self.shots or self.optimize) and prompt.level != "response":
            raise HaldetError(f"few-shot and optimised asks need a response-level prompt; {self.prompt!r} is "
                              f"{prompt.level}-level", where="detector_params", hint="set shots: 0")
        if self.optimize is not None:
            self.optimize.check()
            if not prompt.instructions:
                raise HaldetError(f"prompt {self.prompt!r} names no instructions template to optimise",
                                  where="detector_params", hint="optimise a prompt such as 'faithfulness'")
        return prompt

    @property
    def learned(self) -> bool:
        """Whether the ask depends on the split and training labels (demonstrations, an optimised prompt)."""
        return bool(self.shots) or self.optimize is not None


def asks_of(detectors: Sequence[Any]) -> list[Ask]:
    """The asks the given detector instances read, plus the zero-shot ask of every few-shot one (its wrong
    validation verdicts pick the demonstrations); zero-shot asks first."""
    asks = {d.ask for d in detectors if getattr(d, "ask", None) is not None}
    asks |= {Ask(a.prompt) for a in asks if a.shots}
    for ask in asks:
        ask.check()
    return sorted(asks, key=lambda a: (a.optimize is not None, a.shots, a.prompt, a.name))
