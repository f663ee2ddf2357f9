"""LLM-as-a-judge detectors (TRIVIA+ section 5, appendix A.1): an LLM reads the context, the question and the
answer, reasons, then gives a verdict HALLUCINATION or NO HALLUCINATION. Score 1 for HALLUCINATION, 0 otherwise.

`llm_judge` asks zero-shot; `llm_judge_fs` adds three validation items the zero-shot judge got wrong (seeded), with
their training labels (the paper's FS); `llm_judge_po` starts from the FS prompt and has an LLM rewrite the judge's
instructions from its training mistakes, keeping a rewrite only when it judges validation better (the paper's PO;
`haldet.stages.prompt_optimizer`). The verdicts come from the `verdict` stage (`haldet.stages.verdict`),
asked of the run's model or of `verdict.model` at `verdict.base_url`; the judge that answered is recorded.
An unparsable reply or a failed call is NaN with its reason, never 0.5.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from haldet.detectors.base import Detector, Scores, register
from haldet.schema import Instance, SpanLabel
from haldet.signals import Signal, SignalView
from haldet.stages.prompt_optimizer import Optimize
from haldet.stages.verdict_prompts import Ask, Example, VerdictPrompt, get_prompt, register_prompt

HALLUCINATION, FAITHFUL = "HALLUCINATION", "NO HALLUCINATION"

# the judge's wording: packaged templates `faithfulness_system` (system turn) and `faithfulness_user` (Jinja2 user
# turn: context, question, answer), replaceable by a run config's `templates:`
TEMPLATES = ("faithfulness_system", "faithfulness_user")

_RESPONSE_TAG = re.compile(r"<\s*RESPONSE\s*>(.*?)(?:<\s*/\s*RESPONSE\s*>|$)", re.IGNORECASE | re.DOTALL)
_VERDICT = re.compile(r"\b(NO[\s_-]+HALLUCINAT\w*|NOT[\s_-]+HALLUCINAT\w*|HALLUCINAT\w*)", re.IGNORECASE)


def parse_faithfulness(reply: str) -> tuple[str | None, str]:
    """The verdict of a judge reply: the text inside the last <RESPONSE> tag if any, else the whole reply after the
    thinking; the last verdict phrase found wins ("NO HALLUCINATION" is never read as "HALLUCINATION")."""
    tagged = _RESPONSE_TAG.findall(reply)
    text = tagged[-1] if tagged else re.sub(r"<THINKING>.*?(</THINKING>|$)", " ", reply, flags=re.I | re.S)
    found = _VERDICT.findall(text)
    if not found:
        return None, f"no HALLUCINATION / NO HALLUCINATION verdict in the reply ({reply[-80:]!r})"
    last = found[-1].upper()
    return (FAITHFUL if last.startswith(("NO", "NOT")) else HALLUCINATION), ""


def _faithfulness_messages(instance: Instance, answer: str, examples: Sequence[Example], unit: SpanLabel | None,
                           texts: Mapping[str, str]) -> list[dict[str, str]]:
    import jinja2

    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
    user = env.from_string(texts["faithfulness_user"])

    def turn(inst: Instance, response: str) -> str:
        return user.render(context=inst.context, question=inst.question, answer=response)

    messages = [{"role": "system", "content": texts["faithfulness_system"].strip()}]
    for ex in examples:
        messages += [{"role": "user", "content": turn(ex.instance, ex.response)},
                     {"role": "assistant", "content": f"<RESPONSE>{ex.label}</RESPONSE>"}]
    messages.append({"role": "user", "content": turn(instance, answer)})
    return messages


FAITHFULNESS = register_prompt(VerdictPrompt(
    name="faithfulness", version="faith-v1", labels=(FAITHFUL, HALLUCINATION),
    scores={FAITHFUL: 0.0, HALLUCINATION: 1.0}, messages=_faithfulness_messages, parse=parse_faithfulness,
    templates=TEMPLATES, instructions="faithfulness_system"))


@register("llm_judge")
class LLMJudgeDetector(Detector):
    """Score = the verdict prompt's score of the judge's label (1 = HALLUCINATION); NaN with the reason when the
    reply has no verdict or the call failed."""
    method_family = "judges and verifiers"
    paper = "Zheng et al. 2023, Judging LLM-as-a-judge; TRIVIA+'s zero-shot judge"
    peers: ClassVar[tuple[str, ...]] = ("uqlm",)

    requires = frozenset({Signal.VERDICT})
    defaults: ClassVar[dict[str, Any]] = {"prompt": "faithfulness", "shots": 0, "seed": 42}

    @property
    def ask(self) -> Ask:
        get_prompt(self.params["prompt"])  # an unknown prompt fails at construction time, before any work
        return Ask(self.params["prompt"], int(self.params["shots"]), int(self.params["seed"]))

    def score(self, items: SignalView) -> Scores:
        prompt = get_prompt(self.params["prompt"])
        out = Scores.empty(len(items))
        name = self.ask.name
        judges = set()
        for i, verdicts in enumerate(items.get(Signal.VERDICT)):
            rec = (verdicts or {}).get(name)
            if rec is None:
                out.invalid(i, f"no {name} verdict (the call failed after its retries, or was not asked)")
            elif rec.get("label") is None:
                out.invalid(i, rec.get("reason") or "the reply states no verdict")
            else:
                judges.add(rec.get("judge"))
                out.set(i, prompt.scores[rec["label"]])
        self.meta["judge"] = sorted(j for j in judges if j)
        return out

    def optimized(self, items: SignalView) -> dict[str, Any] | None:
        """The optimisation outcome the verdicts were asked under (an optimised ask's records carry it)."""
        for verdicts in items.get(Signal.VERDICT):
            if (rec := (verdicts or {}).get(self.ask.name)) is not None and rec.get("po"):
                return dict(rec["po"])
        return None


@register("llm_judge_fs")
class FewShotLLMJudge(LLMJudgeDetector):
    """The few-shot judge: three misclassified validation items as demonstrations (labels from training data)."""
    method_family = "judges and verifiers"
    paper = "Zheng et al. 2023, Judging LLM-as-a-judge; TRIVIA+'s few-shot judge"
    peers = ("uqlm",)

    trains = True  # its demonstrations depend on the split and the training labels
    defaults: ClassVar[dict[str, Any]] = {"prompt": "faithfulness", "shots": 3, "seed": 42}


@register("llm_judge_po")
class OptimizedLLMJudge(LLMJudgeDetector):
    """The prompt-optimised judge: the few-shot judge whose instructions an LLM rewrote on training mistakes, kept
    when better on validation (`rounds`, `feedback` mistakes per round, `objective`, the optimiser
    `optimizer_model` at `optimizer_base_url`, default the judge itself). The final instructions and every trial are
    in the detector's meta (`optimized_prompt`, `prompt_optimization`), hence in the manifest and the reports."""
    method_family = "judges and verifiers"
    paper = "TRIVIA+'s prompt-optimised judge (LLM-as-a-judge, Zheng et al. 2023)"
    peers = ()

    trains = True  # the instructions and demonstrations depend on the split and the training labels
    defaults: ClassVar[dict[str, Any]] = {"prompt": "faithfulness", "shots": 3, "seed": 42, "rounds": 3,
                                          "feedback": 4, "objective": "balanced_accuracy", "optimizer_model": None,
                                          "optimizer_base_url": None, "optimizer_max_new_tokens": 512}

    @property
    def ask(self) -> Ask:
        get_prompt(self.params["prompt"])
        p = self.params
        settings = Optimize(rounds=int(p["rounds"]), feedback=int(p["feedback"]), objective=str(p["objective"]),
                            model=p["optimizer_model"], base_url=p["optimizer_base_url"],
                            max_new_tokens=int(p["optimizer_max_new_tokens"]))
        return Ask(p["prompt"], int(p["shots"]), int(p["seed"]), settings.check())

    def score(self, items: SignalView) -> Scores:
        out = super().score(items)
        outcome = self.optimized(items)
        if outcome is not None:
            self.meta["optimized_prompt"] = outcome["instructions"]
            if outcome.get("note"):  # shown in the result rows' note column
                self.meta["note"] = outcome["note"]
            self.meta["prompt_optimization"] = {k: outcome.get(k) for k in (
                "objective", "val_score", "optimizer", "judge", "n_train", "n_val", "trials")}
        return out
