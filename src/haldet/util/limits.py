"""Generation length per item: task-fit limits instead of one number for every dataset.

A 64-token limit fits short QA but cuts every worked GSM8K solution before its final answer. The OpenHalDet paper
sets a maximum generation length of 2048 tokens (appendix G), which its preset uses (`generation.max_new_tokens`);
on the embedded CPU models that would make every short answer pay for reasoning-length decoding, so without the
preset the default is per task type, as below (these caps are haldet's, not the paper's), and
every level can be overridden: `generation.max_new_tokens` (one number for everything, `--max-new-tokens`) wins
over `generation.max_new_tokens_by_dataset` (per dataset name), which wins over
`generation.max_new_tokens_by_task` (per task type, merged over `TASK_MAX_NEW_TOKENS`). Samples use the same
limit as the item's primary answer unless `sample.max_new_tokens` is set.
"""

from __future__ import annotations

from haldet.config import RunConfig
from haldet.schema import Instance

TASK_MAX_NEW_TOKENS: dict[str, int] = {
    # a short answer or a letter (with a sentence of justification at most)
    "short_answer": 64, "span": 64, "multi_hop": 64, "dialogue": 64, "grounded_qa": 64, "qa": 64, "mcq": 64,
    # one sentence or one paragraph
    "summarization": 128,
    # a grounded paragraph, or a JSON list of calls with arguments
    "rag": 256, "tool_call": 256, "long_form": 512,
    # worked solutions and whole functions: the final answer comes last
    "reasoning": 512, "science": 512, "code": 512,
}
FALLBACK_MAX_NEW_TOKENS = 256  # a task type not in the table (plugin datasets)


def max_new_tokens(config: RunConfig, instance: Instance, *, sample: bool = False) -> int:
    """The token limit of one item's primary answer (or of its samples, with `sample=True`)."""
    if sample and config.sample.max_new_tokens is not None:
        return config.sample.max_new_tokens
    gen = config.generation
    if gen.max_new_tokens is not None:
        return gen.max_new_tokens
    if instance.dataset in gen.max_new_tokens_by_dataset:
        return gen.max_new_tokens_by_dataset[instance.dataset]
    table = {**TASK_MAX_NEW_TOKENS, **gen.max_new_tokens_by_task}
    return table.get(instance.task_type, FALLBACK_MAX_NEW_TOKENS)


def limit_source(config: RunConfig, instance: Instance) -> str:
    """The setting that decided an item's limit, for the 'answers cut off' warning."""
    gen = config.generation
    if gen.max_new_tokens is not None:
        return "generation.max_new_tokens (--max-new-tokens)"
    if instance.dataset in gen.max_new_tokens_by_dataset:
        return f"generation.max_new_tokens_by_dataset.{instance.dataset}"
    return f"generation.max_new_tokens_by_task.{instance.task_type}"


def by_limit(limits: list[int]) -> dict[int, list[int]]:
    """Positions grouped by token limit, so one backend call decodes items that share a limit."""
    groups: dict[int, list[int]] = {}
    for pos, limit in enumerate(limits):
        groups.setdefault(limit, []).append(pos)
    return groups


CUT_WARN_SHARE = 0.5  # warn when at least this share of a cell's answers hit the token limit


def cut_off_summary(config: RunConfig, pairs: list[tuple[Instance, str]]) -> dict[str, object]:
    """How many primary answers stopped at the token limit (finish reason `length`), the limits used, and the
    setting that decided them. `pairs`: (instance, finish reason) per item."""
    limits: dict[int, int] = {}
    for inst, _ in pairs:
        limit = max_new_tokens(config, inst)
        limits[limit] = limits.get(limit, 0) + 1
    n_cut = sum(1 for _, finish in pairs if finish == "length")
    share = n_cut / len(pairs) if pairs else 0.0
    out: dict[str, object] = {"n": len(pairs), "n_cut": n_cut, "share_cut": round(share, 4),
                              "max_new_tokens": {str(k): v for k, v in sorted(limits.items())}}
    if pairs:
        out["setting"] = limit_source(config, pairs[0][0])
    if pairs and share >= CUT_WARN_SHARE:
        out["warning"] = (f"{n_cut}/{len(pairs)} answers ({share:.0%}) were cut off at the token limit "
                          f"({', '.join(map(str, sorted(limits)))} tokens); raise {out['setting']} "
                          f"(or --max-new-tokens)")
    return out
