"""Prompt optimisation of an LLM judge (TRIVIA+'s PO baseline): an LLM rewrites the judge's instructions from the
judge's mistakes on training items, and a rewrite is kept only when it judges the validation items better.

The paper obtained PO by giving its few-shot judge prompt to a hosted prompt-improvement tool; that tool cannot run
offline or be pinned, so haldet runs the same idea as an open, seeded loop that any model can drive (the run's own
model or an OpenAI-compatible endpoint). Each round:
1. the judge, under the current instructions, judges the training items;
2. a seeded sample of the items it got wrong (at most `feedback`) is shown to the optimiser LLM with the judge's
   reasoning and the right verdict, together with the current instructions; it answers with rewritten
   instructions inside <INSTRUCTIONS></INSTRUCTIONS>;
3. the judge judges the validation items under the rewrite; the rewrite becomes the current instructions only when
   its validation score (`objective`) beats the best so far.
The loop stops after `rounds` rounds or when no training item is judged wrong. Only training and validation items
and their labels ever enter it: test items are judged once, with the final instructions.

Which part of a prompt is rewritten is the prompt's `instructions` template (for the faithfulness judge its system
turn); the user-turn template, the answer format and the few-shot demonstrations stay as they are, so the verdict
parser keeps working on every candidate.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from haldet.errors import HaldetError
from haldet.schema import Instance

OBJECTIVES = ("balanced_accuracy", "accuracy", "f1")
CONTEXT_CHARS = 1500  # document characters an optimiser sees per mistake (the start; the judge saw all of it)
REPLY_CHARS = 600     # characters of the judge's reasoning shown per mistake (its end, where the verdict is)
CALL_FAILED = "the optimiser call failed after its retries"
TEMPLATES = ("po_optimizer_system", "po_optimizer_user")


@dataclass(frozen=True)
class Optimize:
    """How the judge prompt is optimised: `rounds` rewrite rounds, `feedback` training mistakes shown per round,
    the validation `objective`, and the optimiser LLM (`model` at `base_url`; None = the judge itself)."""

    rounds: int = 3
    feedback: int = 4
    objective: str = "balanced_accuracy"
    model: str | None = None
    base_url: str | None = None
    max_new_tokens: int = 512

    def check(self) -> Optimize:
        if self.rounds < 1 or self.feedback < 1:
            raise HaldetError(f"prompt optimisation needs rounds >= 1 and feedback >= 1 (got rounds={self.rounds}, "
                              f"feedback={self.feedback})", where="detector_params.llm_judge_po",
                              hint="e.g. rounds: 3, feedback: 4")
        if self.objective not in OBJECTIVES:
            raise HaldetError(f"unknown prompt-optimisation objective {self.objective!r}",
                              where="detector_params.llm_judge_po.objective", hint=f"one of {', '.join(OBJECTIVES)}")
        if self.base_url is not None and self.model is None:
            raise HaldetError("optimizer_base_url is set but optimizer_model is not",
                              where="detector_params.llm_judge_po", hint="name the model served there")
        return self


def objective_score(objective: str, labels: Sequence[int], predicted: Sequence[int | None]) -> float | None:
    """The validation score of one set of verdicts: `predicted[i]` is 1 (hallucination), 0, or None for a reply
    without a verdict, which counts as wrong. Balanced accuracy falls back to accuracy when one class is absent;
    None when there is nothing to score."""
    if not labels:
        return None
    right = [p == y for y, p in zip(labels, predicted, strict=True)]
    if objective == "accuracy":
        return sum(right) / len(right)
    if objective == "f1":
        tp = sum(1 for y, p in zip(labels, predicted, strict=True) if y == 1 and p == 1)
        fp = sum(1 for y, p in zip(labels, predicted, strict=True) if y == 0 and p == 1)
        fn = sum(1 for y, p in zip(labels, predicted, strict=True) if y == 1 and p != 1)
        return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    recalls = [sum(r for r, y in zip(right, labels, strict=True) if y == cls) / n
               for cls in (0, 1) if (n := sum(1 for y in labels if y == cls))]
    return sum(recalls) / len(recalls)


@dataclass(frozen=True)
class Mistake:
    """A training item the judge got wrong: what it saw, what it said, and the right verdict word."""

    instance: Instance
    answer: str
    reply: str
    right: str


_INSTRUCTIONS = re.compile(r"<\s*INSTRUCTIONS\s*>(.*?)<\s*/\s*INSTRUCTIONS\s*>", re.IGNORECASE | re.DOTALL)


def parse_instructions(reply: str) -> tuple[str | None, str]:
    """The rewritten instructions: the text inside the last complete <INSTRUCTIONS> pair, stripped; (None, why)
    when there is none or it is empty."""
    found = [text.strip() for text in _INSTRUCTIONS.findall(reply)]
    if not found or not found[-1]:
        return None, f"no <INSTRUCTIONS>...</INSTRUCTIONS> in the optimiser's reply ({reply[-80:]!r})"
    return found[-1], ""


def optimizer_messages(instructions: str, mistakes: Sequence[Mistake],
                       texts: Mapping[str, str]) -> list[dict[str, str]]:
    """The optimiser's chat: its system turn, then the current instructions and the mistakes (templates
    `po_optimizer_system`, `po_optimizer_user`; Jinja2 fields `instructions` and `mistakes`, each with
    `question`, `document`, `answer`, `reasoning`, `right`)."""
    import jinja2

    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
    shown = [{"question": m.instance.question, "answer": m.answer, "right": m.right,
              "document": _clip(m.instance.context, CONTEXT_CHARS, keep="start"),
              "reasoning": _clip(m.reply, REPLY_CHARS, keep="end")} for m in mistakes]
    user = env.from_string(texts["po_optimizer_user"]).render(instructions=instructions, mistakes=shown)
    return [{"role": "system", "content": texts["po_optimizer_system"].strip()}, {"role": "user", "content": user}]


def _clip(text: str, limit: int, *, keep: str) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + " [...]" if keep == "start" else "[...] " + text[-limit:]


@dataclass
class Trial:
    """One candidate of the loop: the round it came from (0 = the starting instructions), its validation score,
    whether it became the best so far, and why a round gave no candidate."""

    round: int
    instructions: str | None
    val_score: float | None = None
    n_val: int = 0
    n_val_answered: int = 0
    mistakes_shown: list[str] = field(default_factory=list)
    kept: bool = False
    note: str = ""


# the judge under given instructions on given item ids -> {id: (1 / 0 / None for no verdict, the judge's reply)};
# ids whose call failed are absent
Judge = Callable[[str, Sequence[str]], dict[str, tuple[int | None, str]]]
# the optimiser's reply to a chat, or None when the call failed after its retries
Rewrite = Callable[[list[dict[str, str]]], str | None]


@dataclass
class Outcome:
    """The loop's result: the final instructions, their validation score and every trial."""

    instructions: str
    val_score: float | None
    objective: str
    trials: list[Trial]

    @property
    def unreached(self) -> bool:
        """Every round that asked the optimiser got no answer: nothing was learned, and saying the starting prompt
        was optimised would be false."""
        asked = [t for t in self.trials[1:] if t.mistakes_shown]
        return bool(asked) and all(t.note == CALL_FAILED for t in asked)

    @property
    def note(self) -> str:
        """Said beside the numbers when no rewrite won: the judge ran with the starting (few-shot) instructions."""
        if self.trials and self.trials[0].instructions == self.instructions:
            return "no rewrite beat the starting instructions on validation: the few-shot prompt was used as is"
        return ""

    def record(self) -> dict[str, Any]:
        return {"instructions": self.instructions, "val_score": self.val_score, "objective": self.objective,
                "note": self.note, "trials": [asdict(t) for t in self.trials]}


def optimize_instructions(initial: str, *, judge: Judge, rewrite: Rewrite, mistake: Callable[[str, str], Mistake],
                          train: Mapping[str, int], val: Mapping[str, int], settings: Optimize, seed: int,
                          texts: Mapping[str, str], progress: Callable[[int], None] = lambda n: None) -> Outcome:
    """Run the loop (module doc) from `initial`. `train` / `val` map item ids to their binary labels (training and
    validation items only); `mistake(id, reply)` builds what the optimiser is shown of a misjudged training item.
    `progress(1)` after each round."""
    val_ids = sorted(val)

    def score(instructions: str, trial: Trial) -> None:
        verdicts = judge(instructions, val_ids)
        answered = [i for i in val_ids if i in verdicts]
        trial.n_val, trial.n_val_answered = len(val_ids), len(answered)
        trial.val_score = objective_score(settings.objective, [val[i] for i in answered],
                                          [verdicts[i][0] for i in answered])

    start = Trial(round=0, instructions=initial, kept=True, note="the starting instructions")
    score(initial, start)
    trials, best = [start], start
    rng = random.Random(seed)
    for r in range(1, settings.rounds + 1):
        verdicts = judge(best.instructions or initial, sorted(train))
        wrong = sorted(i for i in train if i in verdicts and verdicts[i][0] != train[i])
        if not wrong:
            trials.append(Trial(round=r, instructions=None, note="no training item judged wrong: stopped"))
            progress(settings.rounds - r + 1)
            break
        shown = rng.sample(wrong, min(settings.feedback, len(wrong)))
        trial = Trial(round=r, instructions=None, mistakes_shown=shown)
        trials.append(trial)
        reply = rewrite(optimizer_messages(best.instructions or initial,
                                           [mistake(i, verdicts[i][1]) for i in shown], texts))
        progress(1)
        if reply is None:
            trial.note = CALL_FAILED
            continue
        candidate, why = parse_instructions(reply)
        if candidate is None:
            trial.note = why
            continue
        trial.instructions = candidate
        score(candidate, trial)
        if trial.val_score is not None and (best.val_score is None or trial.val_score > best.val_score):
            trial.kept, best = True, trial
        else:
            trial.note = "not better on validation than the best so far"
    return Outcome(best.instructions or initial, best.val_score, settings.objective, trials)
