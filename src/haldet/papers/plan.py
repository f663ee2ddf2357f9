"""What a preset will run and what it will cost, before any work (`haldet presets plan NAME --model M`).

Nothing is loaded: the items per dataset come from the config (`RunConfig.limit_for`; a whole split counts the
split sizes below), the stages from the detectors' needs (the caller hands them in), and the cost from the same
throughput model as docs/scale.md (benchmarks/matrix_cost.py): prefill at `mfu` of an H100's bf16 peak, 2 x params
FLOPs per token; decoding memory-bound, the weights read once per step for `rows` rows at `bw_use` of the
bandwidth, times `step_overhead`. Token counts per item are estimates per dataset (below), not measurements; a
model whose size cannot be read from its name gets no GPU-hours (say `--params`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from haldet.config import RunConfig

# dataset -> (items in the split haldet reads, prompt tokens, answer tokens): estimates for the plan
SPLITS: dict[str, tuple[int, int, int]] = {
    "arc_challenge": (1172, 150, 8), "commonsenseqa": (1221, 120, 8), "triviaqa": (17944, 60, 16),
    "truthfulqa": (817, 60, 40), "squad_v2": (11873, 220, 16), "hotpotqa": (7405, 300, 20),
    "coqa": (7983, 450, 16), "halueval_qa": (10000, 160, 30), "ragtruth": (2700, 750, 200),
    "xsum": (11334, 550, 40), "gsm8k": (1319, 150, 220), "svamp": (700, 110, 150), "theoremqa": (800, 150, 350),
    "humaneval": (164, 180, 220), "mbpp": (500, 140, 160), "xlam": (60000, 800, 60), "belebele": (900, 300, 8),
    # suites: the answers are given; items as released (HalluEntity 157 biographies, VeriGray 412 summaries,
    # TRIVIA+ Table 2: 3,224 / HaluEval QA 20K / RAGTruth QA 989 / Dolly 100)
    "halluentity": (157, 40, 300), "verigray": (412, 600, 120), "triviaplus": (3224, 2300, 80),
    "halueval_qa_pairs": (20000, 200, 30), "ragtruth_qa": (989, 400, 150), "dolly_nc": (100, 900, 150),
    "hallulens_precisewikiqa": (5000, 40, 30), "hallulens_longwiki": (250, 60, 600),
    "hallulens_nonexistent": (1950, 40, 250),
}
# name part -> (parameters, layers, hidden width)
KNOWN_MODELS: dict[str, tuple[float, int, int]] = {
    "llama-3.2-3b": (3.21e9, 28, 3072), "llama-3.1-8b": (8.03e9, 32, 4096), "qwen3-8b": (8.19e9, 36, 4096),
    "qwen3-14b": (14.8e9, 40, 5120), "llama-3.3-70b": (70.6e9, 80, 8192), "smollm2-135m": (1.35e8, 30, 576),
    "mistral-7b": (7.24e9, 32, 4096), "llama-2-7b": (6.74e9, 32, 4096), "meta-llama-3-8b": (8.03e9, 32, 4096),
}
PEAK_FLOPS, BANDWIDTH = 989e12, 3.35e12  # H100 SXM bf16 dense, HBM3
# measured by benchmarks/gpu.py on one H200 (Llama-3.1-8B's shape, bf16, eager PyTorch, 100 prompts x 64 tokens):
# seconds per decoded token of haldet's loop, greedy and K=5 sampling (docs/speed.md); the roofline decoding above
# gives an 8B model 0.14 ms, so eager decoding is host-bound far above it
MEASURED_8B_H200 = {"greedy": 3.1e-3, "sampling": 0.79e-3}
JUDGE_OVERHEAD = 700     # judge instructions and three calibration examples, tokens
VERDICT_OVERHEAD = 300   # a verdict prompt's instructions, tokens
VERDICT_REPLY = 512      # a verdict reply when the prompt sets its own budget (reasoning first), tokens
AUX_REPLY = 8            # a follow-up's reply (a confidence, or True/False), tokens
EVALUATOR_OVERHEAD = 80  # an evaluator chat's system turn and ask (`auxiliary.procedure: evaluator`), tokens
EVALUATOR_REASONING = 200  # an evaluator's self-evaluation reply, reasoning before its verdict (assumed), tokens
JSONL_ITEM, JSONL_SCORE, SAMPLE_TEXT = 1800, 110, 5700  # bytes per item (answer record; score; K samples at A=30)


@dataclass
class Assumptions:
    mfu: float = 0.4
    bw_use: float = 0.7
    rows: int = 96
    step_overhead: float = 2.0
    params: float | None = None  # overrides the size read from the model name

    def lines(self) -> list[str]:
        return [f"GPU: H100 SXM ({PEAK_FLOPS / 1e12:.0f} TFLOP/s bf16, {BANDWIDTH / 1e12:.2f} TB/s); prefill at "
                f"{self.mfu:.0%} of peak, decoding at {self.bw_use:.0%} of the bandwidth, {self.rows} rows per "
                f"step, x{self.step_overhead:g} per-step overhead (docs/scale.md): a lower bound. Measured once "
                f"(benchmarks/gpu.py, one H200, an 8B model, eager PyTorch): "
                f"{MEASURED_8B_H200['greedy'] * 1e3:.1f} ms a greedy token, "
                f"{MEASURED_8B_H200['sampling'] * 1e3:.2f} ms a sampled one, where these constants give "
                f"{gpu_seconds(KNOWN_MODELS['llama-3.1-8b'][0], 0, 1, self) * 1e3:.2f} ms",
                "prompt and answer tokens per item: per-dataset estimates (haldet.papers.plan.SPLITS), answers "
                "capped at the config's token limit; a whole split counts the split sizes listed there",
                f"judge prompt = item + answer + {JUDGE_OVERHEAD} tokens (instructions, three examples); verdict "
                f"prompt = item + answer + {VERDICT_OVERHEAD}; replies counted at their budget (an upper bound)",
                "disk: float16 feature arrays (seven [layers + 1, width] per item), K sample states, JSONL logs"]


@dataclass
class Endpoint:
    role: str
    model: str
    calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    forward_passes: int = 0  # teacher-forced passes (no tokens generated)


@dataclass
class Plan:
    preset: str
    model: str
    datasets: list[dict[str, Any]] = field(default_factory=list)
    detectors: dict[str, list[str]] = field(default_factory=dict)
    stages: list[str] = field(default_factory=list)
    endpoints: list[Endpoint] = field(default_factory=list)
    gpu_hours: float | None = None
    disk_gb: float | None = None
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


def gpu_seconds(params: float, prefill: float, decoded: float, a: Assumptions) -> float:
    """GPU seconds for `prefill` prompt tokens and `decoded` generated tokens of a `params`-parameter model: prefill
    compute-bound (2 x params FLOPs a token at `mfu` of the peak), decoding memory-bound (the weights read once a
    step for `rows` rows at `bw_use` of the bandwidth, times `step_overhead`). Also benchmarks/matrix_cost.py's."""
    return (prefill * 2 * params / (PEAK_FLOPS * a.mfu)
            + decoded * a.step_overhead * 2 * params / (BANDWIDTH * a.bw_use) / a.rows)


def model_size(name: str, params: float | None = None) -> tuple[float, int, int] | None:
    """(parameters, layers, width) of a model from its name: a known backbone, else "<n>B"/"<n>M" in the name
    (layers and width then estimated from the parameter count)."""
    key = name.lower().rsplit("/", 1)[-1]
    known = next((v for k, v in KNOWN_MODELS.items() if key.startswith(k)), None)
    if known and params is None:
        return known
    if params is None:
        found = re.search(r"(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", key)
        if not found:
            return None
        params = float(found.group(1)) * (1e9 if found.group(2) == "b" else 1e6)
    layers = known[1] if known else 32
    return params, layers, known[2] if known else int((params / (12 * layers)) ** 0.5)


def items_of(config: RunConfig, dataset: str) -> tuple[int | None, str]:
    """Items the run evaluates of `dataset` and where that number comes from."""
    limit = config.limit_for(dataset)
    split = SPLITS.get(dataset, (None, 0, 0))[0]
    if limit is None:
        return split, "whole split" if split is not None else "whole split (size unknown until loaded)"
    if split is not None and split < limit:
        return split, f"whole split (under the cap {limit:,})"
    return limit, "limit" if dataset not in config.limit_by_dataset else "limit_by_dataset"


def _answer_tokens(config: RunConfig, dataset: str) -> int:
    gen, estimate = config.generation, SPLITS.get(dataset, (0, 200, 100))[2]
    cap = gen.max_new_tokens if gen.max_new_tokens is not None else gen.max_new_tokens_by_dataset.get(dataset)
    return min(estimate, cap) if cap else estimate


def build_plan(preset: str, config: RunConfig, model: str, stages_by_detector: Mapping[str, Sequence[str]],
               verdict_detectors: Sequence[str] = (), given_answers: bool = False,
               assumptions: Assumptions | None = None) -> Plan:
    """The plan of `config` (a preset resolved with the user's models) on `model`."""
    a = assumptions or Assumptions()
    stages = sorted({s for names in stages_by_detector.values() for s in names}, key=_stage_rank)
    plan = Plan(preset=preset, model=model, detectors={k: list(v) for k, v in stages_by_detector.items()},
                stages=stages, assumptions=a.lines())
    target = Endpoint("model under test", model)
    judge = Endpoint("judge (labels)", config.judge.model or "(none: --judge-model)")
    verdict = Endpoint("verdict (LLM detectors)", config.verdict.model or "(the model under test)")
    size = model_size(model, a.params)
    k = config.sample.k
    prefill = decoded = disk = 0.0
    for name in config.datasets:
        n, source = items_of(config, name)
        p, ans = SPLITS.get(name, (None, 200, 100))[1], _answer_tokens(config, name)
        plan.datasets.append({"dataset": name, "items": n, "source": source, "prompt_tokens": p,
                              "answer_tokens": ans})
        if n is None:
            plan.notes.append(f"{name}: the split's size is unknown until loaded: left out of the totals")
            continue
        if given_answers:
            target.forward_passes += n
            prefill += n * (p + ans)
        else:
            target.calls += n
            target.prompt_tokens += n * p
            target.generated_tokens += n * ans
            prefill, decoded = prefill + n * p, decoded + n * ans
        if "sample" in stages:
            target.calls += n * k
            target.prompt_tokens += n * k * p
            target.generated_tokens += n * k * ans
            prefill, decoded = prefill + n * p, decoded + n * k * ans  # the K samples share the prompt's cache
        if "auxiliary" in stages and config.auxiliary.procedure == "evaluator":  # two separate chats per answer
            reply = AUX_REPLY + min(EVALUATOR_REASONING, config.auxiliary.evaluator_budget(False))
            target.calls += 2 * n
            target.prompt_tokens += 2 * n * (p + ans + EVALUATOR_OVERHEAD)
            target.generated_tokens += n * reply
            prefill, decoded = prefill + 2 * n * (p + ans + EVALUATOR_OVERHEAD), decoded + n * reply
        elif "auxiliary" in stages:
            target.calls += 2 * n
            target.prompt_tokens += 2 * n * (p + ans + 40)
            target.generated_tokens += 2 * n * AUX_REPLY
            prefill, decoded = prefill + n * (ans + 120), decoded + 2 * n * AUX_REPLY
        if "features" in stages or "redeep" in stages:
            target.forward_passes += n
            prefill += n * (p + ans)
        if "unconditional" in stages:  # the answer alone, after a start token
            target.forward_passes += n
            prefill += n * (ans + 1)
        if not given_answers and config.judge.kind in ("llm", "cascade") and config.judge.model:
            judge.calls += n
            judge.prompt_tokens += n * (p + ans + JUDGE_OVERHEAD)
            judge.generated_tokens += n * config.judge.reply_budget()
        if "verdict" in stages:
            m = n * len(verdict_detectors)
            verdict.calls += m
            verdict.prompt_tokens += m * (p + ans + VERDICT_OVERHEAD)
            reply = config.verdict.max_new_tokens or VERDICT_REPLY
            verdict.generated_tokens += m * reply
            if not config.verdict.model:  # the run's own model answers: its GPU time counts
                prefill, decoded = prefill + m * (p + ans + VERDICT_OVERHEAD), decoded + m * reply
        if size:
            _, layers, width = size
            disk += n * (JSONL_ITEM * (1 + ans / 30) + JSONL_SCORE * len(stages_by_detector)
                         + (14 * (layers + 1) * width if "features" in stages else 0)
                         + ((2 * k * width + SAMPLE_TEXT * ans / 30) if "sample" in stages else 0)
                         + (800 if "auxiliary" in stages else 0))
    plan.endpoints = [e for e in (target, judge, verdict) if e.calls or e.forward_passes]
    if size:
        params = size[0]
        seconds = gpu_seconds(params, prefill, decoded, a)
        plan.gpu_hours, plan.disk_gb = seconds / 3600, disk / 1e9
        plan.assumptions.append(f"{model}: {params / 1e9:.2f}B parameters, {size[1]} layers, width {size[2]}")
    else:
        plan.notes.append(f"the size of {model!r} cannot be read from its name: no GPU-hours or disk (give "
                          f"--params, e.g. 8e9)")
    if "auxiliary" in stages and config.auxiliary.procedure == "evaluator":
        plan.assumptions.append(f"auxiliary (evaluator procedure): two separate chats per answer, a {AUX_REPLY}-token "
                                f"confidence and a self-evaluation of about {EVALUATOR_REASONING} tokens (at most "
                                f"{config.auxiliary.evaluator_budget(False)})")
    if given_answers:
        plan.notes.append("the suite's answers are given: the model under test reads them (one teacher-forced "
                          "pass per item), it generates no answers")
    if "verdict" in stages and not config.verdict.model:
        plan.notes.append("verdict.model is not set: the LLM detectors ask the model under test (counted in its "
                          "GPU-hours)")
    return plan


def _stage_rank(name: str) -> tuple[int, str]:
    order = ("generate", "annotate", "sample", "auxiliary", "features", "redeep", "unconditional", "verdict")
    return (order.index(name) if name in order else len(order), name)


def plan_lines(plan: Plan) -> list[str]:
    """The plan as printed text."""
    total = sum(d["items"] or 0 for d in plan.datasets)
    out = [f"preset {plan.preset} on {plan.model}: {len(plan.datasets)} datasets, {total:,} items; stages: "
           f"{', '.join(plan.stages)}", "", "dataset | items | from | prompt tok | answer tok (est.)"]
    out += [f"{d['dataset']} | {'?' if d['items'] is None else format(d['items'], ',')} | {d['source']} | "
            f"{d['prompt_tokens']} | {d['answer_tokens']}" for d in plan.datasets]
    out += ["", "detector | stages it needs"]
    out += [f"{name} | {', '.join(stages)}" for name, stages in plan.detectors.items()]
    out += ["", "endpoint | model | calls | prompt tokens | generated tokens | teacher-forced passes"]
    out += [f"{e.role} | {e.model} | {e.calls:,} | {e.prompt_tokens:,} | {e.generated_tokens:,} | "
            f"{e.forward_passes:,}" for e in plan.endpoints]
    est = ("unknown" if plan.gpu_hours is None or plan.disk_gb is None
           else f"{plan.gpu_hours:,.2f} GPU-hours (H100), {plan.disk_gb:,.2f} GB on disk")
    out += ["", f"estimate: {est}", "assumptions:"] + [f"  - {a}" for a in plan.assumptions]
    out += ["notes:"] + [f"  - {n}" for n in plan.notes] if plan.notes else []
    return out
