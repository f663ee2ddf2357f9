"""The default judge: deterministic judges where the task allows, the LLM judge for the rest when one is
configured; `invalid` (with every judge's reason) when none decides. Which judge labelled each item is
recorded in the label.

`--judge` picks the chain: `rule` (rule judges only), `exec` (execution only), `llm` (the LLM judge for every
item), `cascade` (rule + exec, then the LLM judge when `judge.model` is set). Plugin judges named in
`judge.extra` (registered with `@register("name")`, constructible without arguments) come first in any chain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from haldet.config import JudgeConfig
from haldet.judges.base import JUDGES, Judge, JudgeFailure, Pair, Undecided, Verdict
from haldet.judges.execution import ExecutionJudge
from haldet.judges.math import MathJudge
from haldet.judges.mcq import MCQJudge
from haldet.judges.short_answer import ShortAnswerJudge
from haldet.judges.similarity import ReferenceSimilarityJudge
from haldet.judges.tool_call import ToolCallJudge
from haldet.schema import Category, Label

NO_ANSWER_JUDGE = "no-answer"  # labels an output without an answer (cut off inside its reasoning) invalid

Outcome = Label | JudgeFailure  # what the cascade gives per item: a label (maybe invalid) or a failure


def rule_judges(config: JudgeConfig) -> list[Judge]:
    return [MCQJudge(), MathJudge(rel_tol=config.math_rel_tol), ToolCallJudge(),
            ShortAnswerJudge(f1_threshold=config.f1_threshold), ReferenceSimilarityJudge()]


def exec_judges(config: JudgeConfig) -> list[Judge]:
    return [ExecutionJudge(timeout=config.exec_timeout, memory_mb=config.exec_memory_mb,
                           workers=config.exec_workers)]


def llm_judge(config: JudgeConfig, templates: dict[str, Any] | None = None, see_reasoning: bool = False) -> Judge:
    from haldet.judges.llm import LLMJudge  # lazy: h5py

    return LLMJudge(config, templates=templates, see_reasoning=see_reasoning)


class Cascade:
    def __init__(self, judges: list[Judge], name: str = "cascade") -> None:
        self.judges = judges
        self.name = name

    @classmethod
    def from_config(cls, config: JudgeConfig, templates: dict[str, Any] | None = None, *,
                    see_reasoning: bool = False) -> Cascade:
        """The judges `config` names; `templates` (the run config's) may replace the LLM judge's prompts;
        `see_reasoning`: the LLM judge sees a reasoning model's reasoning before its answer."""
        if config.kind == "rule":
            judges = rule_judges(config)
        elif config.kind == "exec":
            judges = exec_judges(config)
        elif config.kind == "llm":
            judges = [llm_judge(config, templates, see_reasoning)]
        else:
            judges = rule_judges(config) + exec_judges(config)
            if config.model:
                judges.append(llm_judge(config, templates, see_reasoning))
        plugins = [JUDGES.get(name, where="judge.extra")() for name in config.extra]
        return cls(plugins + judges, name=config.kind)

    def fingerprint(self) -> list[Any]:
        return [self.name, *(j.fingerprint() for j in self.judges), [j.version for j in self.judges]]

    def local_models(self, task_types: frozenset[str]) -> list[tuple[str, str]]:
        """(judge id, model) of every local model the chain loads for items of these task types."""
        return [(j.id, m) for j in self.judges for m in j.local_models(task_types)]

    def usage(self) -> dict[str, Any]:
        """Calls, tokens and cost of the judges that call a model."""
        return {j.id: j.usage_report() for j in self.judges if hasattr(j, "usage_report")}

    def judge(self, instance: Any, generation: Any) -> Outcome:
        out: list[Outcome] = []
        self.judge_many([(instance, generation)], lambda i, o: out.append(o))
        return out[0]

    def judge_many(self, pairs: Sequence[Pair], on_done: Callable[[int, Outcome], None]) -> None:
        """Each judge in turn gets the items still undecided that it applies to; `on_done` fires as soon as an
        item has its final outcome, so the caller can store it at once."""
        reasons: dict[int, list[str]] = {i: [] for i in range(len(pairs))}
        pending = list(range(len(pairs)))
        for index, (instance, generation) in enumerate(pairs):  # no answer (cut off inside its reasoning): no judge
            if generation.no_answer:
                on_done(index, Label(id=instance.id, category=Category.INVALID, judge=NO_ANSWER_JUDGE,
                                     reasoning=generation.no_answer))
        pending = [i for i in pending if not pairs[i][1].no_answer]
        for judge in self.judges:
            mine = [i for i in pending if judge.applies(pairs[i][0])]
            if not mine:
                continue
            undecided: set[int] = set()

            def done(local: int, verdict: Verdict, mine: list[int] = mine, undecided: set[int] = undecided) -> None:
                index = mine[local]
                if isinstance(verdict, Undecided):
                    reasons[index].append(verdict.reason)
                    undecided.add(index)
                else:
                    on_done(index, verdict)

            judge.judge_many([pairs[i] for i in mine], done)
            mine_set = set(mine)
            pending = [i for i in pending if i not in mine_set or i in undecided]
        for index in pending:
            instance = pairs[index][0]
            why = "; ".join(reasons[index]) or (
                f"no configured judge handles task type {instance.task_type!r} with these fields "
                f"(judges: {', '.join(j.id for j in self.judges)}; configure an LLM judge with --judge-model)")
            on_done(index, Label(id=instance.id, category=Category.INVALID, judge=self.name,
                                 reasoning=f"undecided: {why}"))
