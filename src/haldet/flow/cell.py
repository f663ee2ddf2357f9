"""One (dataset, model) cell, the same flow for every level and benchmark; the protocol (`haldet.flow.protocol`:
OpenHalDet's, or a suite's) is its only parameter.

Flow: load items and render prompts -> generate (a provided response is teacher-forced; the evidence the detectors
read rides on that one pass where it can) -> labels (the judges, or the data) -> split -> per training-label set:
the evidence stages the detectors read, then per detector and level the one scoring path (`haldet.flow.scoring`).
A cell that fails is reported by `guarded_cell` and the other cells still finish.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from haldet.backends.base import Backend, Capability
from haldet.backends.select import access_level
from haldet.backends.select import make_backend as select
from haldet.config import RunConfig, digest
from haldet.datasets.adapter import LoadReport
from haldet.datasets.base import DATASETS, get_adapter
from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError, is_storage_error
from haldet.evaluation.cost import stage_stats
from haldet.flow.protocol import Procedure, procedure_for
from haldet.flow.scoring import DetectorRun, make_detector, score_detector
from haldet.schema import Instance
from haldet.signals import Signal, SignalView
from haldet.stages.base import CellContext, Item, OtherSampler, Progress
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader, ensure_stages, evidence_gaps, evidence_key, needed_stages, record_used
from haldet.store import RunStore
from haldet.text.prompts import PromptBuilder, demo_pool_size, given_response_prompts, render_prompts
from haldet.util.limits import limit_source


@dataclass
class CellResult:
    dataset: str
    scenario: str
    model: str
    detectors: list[DetectorRun] = field(default_factory=list)
    label_counts: dict[str, int] = field(default_factory=dict)
    annotation: dict[str, Any] = field(default_factory=dict)
    split_sizes: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)  # per-stage cost stats (haldet.evaluation.cost)
    untimed: list[str] = field(default_factory=list)  # cached detectors whose original timings are unknown
    fingerprint: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    extra_rows: list[dict[str, Any]] = field(default_factory=list)  # a suite's own tables (Suite.extra_rows)


def make_backend(model: str, config: RunConfig) -> Backend:
    return select(model, config)


def other_sampler(config: RunConfig, model: str, builder: PromptBuilder,
                  backends: dict[str, Backend]) -> OtherSampler | None:
    """The model named by `sample.model` when it is not the cell's own: its backend (shared with the run's cache;
    an `openai:` model reaches `sample.base_url` / `sample.api_key_env` where given) and the item's messages rendered
    with its chat template. Few-shot demos are the cell model's prompt only, so they are refused here."""
    spec = config.sample.model
    if spec is None or spec == model:
        return None
    if config.prompt.n_shots:
        raise HaldetError("samples from another model (sample.model) cannot carry few-shot demos",
                          where="sample.model with prompt.n_shots", hint="set prompt.n_shots: 0 or drop sample.model")
    endpoint = config.endpoint.model_copy(update={k: v for k, v in (("base_url", config.sample.base_url),
                                                                     ("api_key_env", config.sample.api_key_env))
                                                  if v is not None})
    sample_config = config.model_copy(update={"endpoint": endpoint})
    key = f"sample:{spec}"

    def factory() -> Backend:
        if key not in backends:
            backends[key] = make_backend(spec, sample_config)
        return backends[key]

    sampler = OtherSampler(spec, factory, lambda item: sampler.backend().render_chat(builder.messages(item.instance)))
    return sampler


def detector_signals(names: list[str], config: RunConfig | None = None) -> frozenset[Signal]:
    """Every signal the named detectors read, as configured (a variant may read less): the evidence a run computes."""
    return frozenset().union(*(_reads(name, config) for name in names))


def _reads(name: str, config: RunConfig | None) -> frozenset[Signal]:
    if config is None:
        return DETECTORS.get(name, where="--detector").requires
    return make_detector(name, config).signals()


def load_instances(config: RunConfig, dataset: str) -> tuple[list[Instance], list[Instance], LoadReport]:
    """A cell's instances, its few-shot demo pool and the load report, loaded as the run loads them (the readers of
    a stored run reload a suite's items, whose labels ship with the data, through this too). The demos come from
    the rows of the same seeded order past the evaluated limit: never an evaluated item."""
    adapter = get_adapter(dataset, config.data_dir, config.dataset_params.get(dataset))
    limit = config.limit_for(dataset)
    n_pool = demo_pool_size(config.prompt.n_shots) if limit is not None else 0
    loaded, report = adapter.load(limit=None if limit is None else limit + n_pool,
                                  seed=config.data_seed, on_bad_row=config.on_bad_row)
    if limit is None:
        return loaded, [], report
    return loaded[:limit], loaded[limit:], report


def prepare_cell(config: RunConfig, store: RunStore, dataset: str, model: str, progress: Progress,
                 backends: dict[str, Backend]) -> tuple[CellResult, CellContext, list[Item]]:
    """Load a cell's items and render their prompts exactly as the run does (also used by `haldet annotate` and the
    stage commands, which must find the same generation records)."""
    adapter = get_adapter(dataset, config.data_dir, config.dataset_params.get(dataset))
    result = CellResult(dataset=dataset, scenario=adapter.scenario, model=model)
    start = time.perf_counter()
    instances, pool, report = load_instances(config, dataset)
    if not instances:
        raise HaldetError(f"dataset {dataset!r} gave no items", where=f"{report.origin} (split {report.split})",
                          hint=f"check the file(s) with `haldet datasets show {dataset}`; pick another split with "
                               f"--split NAME")
    builder = PromptBuilder(config.prompt, config.templates)
    result.data = {"origin": report.origin, "split": report.split, "n_items": len(instances),
                   "n_skipped": report.n_skipped, "skipped": report.skipped, "n_filtered": report.n_filtered,
                   "n_demo_pool": len(pool), "prompt_templates": builder.templates.fingerprint(),
                   "fingerprint": digest([i.model_dump(mode="json") for i in instances])}
    load_seconds = time.perf_counter() - start

    def backend_factory() -> Backend:
        if model not in backends:
            backends[model] = make_backend(model, config)
        return backends[model]

    cell = store.cell(dataset, model)
    ctx = CellContext(config=config, dataset=dataset, model=model, store=cell, backend_factory=backend_factory,
                      progress=progress, signals=detector_signals(config.detectors, config),
                      detectors=[make_detector(name, config) for name in config.detectors])
    ctx.sampler = other_sampler(config, model, builder, backends)
    ctx.timings["load_data"] = load_seconds
    instances = procedure_for(config).prepare_instances(instances, ctx.backend)
    prompts = given_response_prompts(config.tokens, instances, render_prompts(builder, ctx.backend, instances, pool))
    items = [Item(instance=inst, prompt=prompt) for inst, prompt in zip(instances, prompts, strict=True)]
    result.fingerprint = ctx.backend.fingerprint()
    return result, ctx, items


def run_cell(config: RunConfig, store: RunStore, dataset: str, model: str, progress: Progress,
             backends: dict[str, Backend], previous: dict[str, Any] | None = None) -> CellResult:
    """One (dataset, model) cell: every selected detector reads the same evidence, computed once.

    `previous` is this cell's entry in the run's earlier manifest: a fully cached rerun keeps the timings the
    evidence and detectors took when they were computed (cost accounting), instead of a cache-read zero.
    """
    previous = previous or {}
    protocol = procedure_for(config)
    progress(f"{dataset} | {model}: loading the data and the model", 0)
    result, ctx, all_items = prepare_cell(config, store, dataset, model, progress, backends)
    progress(f"{dataset} | {model}: {len(all_items)} items from {result.data['origin']} "
             f"(split {result.data['split']})", 0)
    ctx.backend.reset_usage()  # a remote model's calls and cost are reported per cell
    items = protocol.scorable(all_items, result)
    ctx.backend.forget_prompts()  # what an earlier cell of this model kept if it ended by an error
    with ctx.backend.keeping_prompts(samples_follow(ctx)):
        gen_records = GenerateStage(ctx).ensure(items)
    items = [item for item in items if item.id in gen_records]  # failed remote calls: no answer, not evaluated
    if not items:  # nothing to label or score: the cell ends here, its failures listed (outcome summary)
        result.error = "no item got an answer from the model (see generate.failed.jsonl)"
        return _finish(result, ctx)
    attach_generations(items, gen_records)
    record_used(ctx, {GenerateStage.name: gen_records})  # the answers this run used: what readers show
    if cut := no_answer_summary(config, items):
        result.data["no_answer"] = cut
    labels = protocol.label(ctx, items, all_items, result, previous)
    if not labels and protocol.needs_labels:  # nothing to evaluate a detector on: say why instead of an empty table
        result.error = no_usable_labels(result)
        return _finish(result, ctx)
    split, recorded = protocol.split(all_items, labels)
    ev = config.evaluation
    ctx.store.write_json("split.json", {"seed": ev.split_seed, "fractions": list(ev.split), **recorded, **split})
    result.split_sizes = {k: len(v) for k, v in split.items()}
    if protocol.needs_labels and (why := thin_split(split, labels, ev.min_per_class)):
        result.data["thin"] = why
    evaluated = protocol.evaluated(items, labels)
    unscored = protocol.unscored(all_items, items)
    for r, (regime, train) in enumerate(protocol.training_labels(all_items, labels)):
        ctx.split, ctx.labels = split, train  # few-shot verdict demonstrations come from these labels
        # only the evidence stages the selected detectors read, only for items lacking a current record
        stage_records = ensure_stages(ctx, evaluated, needed_stages(ctx.signals or ()))
        gaps = evidence_gaps(ctx, evaluated, stage_records)
        record_used(ctx, stage_records, add=r > 0)  # the evidence this run used: what readers show
        if r == 0:
            stage_records[GenerateStage.name] = {i.id: gen_records[i.id] for i in evaluated}
            result.evidence = {name: stage_stats(name, recs, wall_seconds=ctx.timings.get(name),
                                                 computed=ctx.counts.stage(name).computed,
                                                 previous=(previous.get("evidence") or {}).get(name))
                               for name, recs in stage_records.items()}
        view = SignalView(ids=[i.id for i in evaluated], instances=[i.instance for i in evaluated],
                          generations=[i.generation for i in evaluated if i.generation is not None],
                          loader=EvidenceLoader(ctx, evaluated),
                          labels=np.array([train.get(i.id, -1) for i in evaluated]))
        _score_all(CellScoring(protocol, ctx, evaluated, split, unscored, result, previous, gaps), view,
                   (regime, train),
                   first_pass=r == 0)
    result.extra_rows = protocol.extra_rows(all_items, split, result.detectors)
    return _finish(result, ctx)


def samples_follow(ctx: CellContext) -> bool:
    """Whether this process draws the cell's samples from its own model after the greedy answers: then the greedy
    decoding keeps each prompt's read state for them (`Backend.keeping_prompts`)."""
    return (ctx.sampler is None and ctx.shard_runner is None
            and "sample" in needed_stages(ctx.signals or ()))


@dataclass
class CellScoring:
    """What every detector of a cell is scored with: the protocol, the cell's context, the evaluated items, the
    split, the unscorable items (NaN units), and where the runs go (the result, and the earlier manifest entry)."""

    protocol: Procedure
    ctx: CellContext
    items: list[Item]
    split: dict[str, list[str]]
    unscored: dict[str, Any]
    result: CellResult
    previous: dict[str, Any]
    gaps: dict[str, list[str]] = field(default_factory=dict)  # stage -> items it holds no full record for
    stage_keys: dict[str, dict[str, str]] = field(default_factory=dict)  # stage -> item -> key (`evidence_key`)


def _score_all(cs: CellScoring, view: SignalView, train_labels: tuple[str, dict[str, int]], *,
               first_pass: bool) -> None:
    """Every selected detector at every level of the protocol it scores (trained ones only after the first
    training-label set), through the one scoring path; a detector bug or bad parameter is reported, no number."""
    protocol, ctx, result = cs.protocol, cs.ctx, cs.result
    config = protocol.config
    names = [n for n in config.detectors if first_pass or DETECTORS.get(n, where="--detector").trains]
    advance = ctx.progress(f"detectors [{ctx.dataset} | {ctx.model}]", len(names))
    for name in names:
        cls = DETECTORS.get(name, where="--detector")
        for level in protocol.levels:
            if level not in cls.levels:  # e.g. a response-level detector in an entity-level suite
                if first_pass:
                    result.data.setdefault("not_scored", []).append(
                        f"{name} at {level} level (it scores {', '.join(cls.levels)})")
                continue
            try:
                detector = make_detector(name, config)
                ev_key = evidence_key(ctx, cs.items, needed_stages(detector.signals()), cs.gaps,
                                      known=cs.stage_keys)
                run = score_detector(name, level, protocol, ctx.store, view, cs.split, ev_key,
                                     progress=ctx.progress, train_labels=train_labels, detector=detector,
                                     unscored=cs.unscored)
            except (ValueError, RuntimeError) as exc:  # a detector bug or bad parameter: reported, no number
                run = DetectorRun(name=name, family=str(cls.family()), level=level,
                                  train_labels=train_labels[0] if cls.trains else "",
                                  error=f"{type(exc).__name__}: {exc}")
            if not run.timing_known and not carry_timings(run, cs.previous):  # a run before timings.json
                result.untimed.append(name)
            result.detectors.append(run)
        advance(1)


def _finish(result: CellResult, ctx: CellContext) -> CellResult:
    ctx.backend.forget_prompts()  # greedy prompts kept for samples (every way out of the cell: none are drawn now)
    result.timings = dict(ctx.timings)
    result.counts = dict(ctx.counts)
    if Capability.USAGE in ctx.backend.capabilities:  # a remote target model: calls, tokens, cost, breaker state
        result.data["backend_usage"] = ctx.backend.usage_report()
    result.data["access"] = access_level(ctx.model, ctx.config, result.data.get("backend_usage"))
    return result


def no_answer_summary(config: RunConfig, items: list[Item]) -> dict[str, Any]:
    """Outputs without an answer (cut off inside their reasoning, or stopped there): how many, and the limit to
    raise; {} when every output has one. They are labelled invalid and never scored."""
    cut = [item for item in items if item.generation is not None and item.generation.no_answer]
    if not cut:
        return {}
    return {"n": len(cut), "of": len(items), "setting": limit_source(config, cut[0].instance),
            "reason": str(cut[0].generation.no_answer if cut[0].generation else "")}


def no_usable_labels(result: CellResult) -> str:
    """Why a cell has no correct/hallucination label: the label counts, the share cut off by the token limit,
    and what to change."""
    counts = ", ".join(f"{n} {c}" for c, n in sorted(result.label_counts.items())) or "no labels"
    gen = result.data.get("generation") or {}
    text = f"no usable label (correct or hallucination): {counts}"
    if gen.get("n_cut"):
        text += f"; {gen['n_cut']}/{gen['n']} answers were cut off at the token limit (raise {gen.get('setting')})"
    elif result.label_counts.get("invalid"):
        text += "; see the judges' reasons in annotate.jsonl (an LLM judge, --judge-model, decides open answers)"
    return text


def thin_split(split: dict[str, list[str]], labels: dict[str, int], minimum: int) -> str:
    """Why the test split is too thin to rank detectors (fewer than `minimum` labelled items of a class), or ''."""
    test = [labels[i] for i in split.get("test", []) if i in labels]
    n_pos = sum(test)
    n_neg = len(test) - n_pos
    if min(n_pos, n_neg) >= minimum:
        return ""
    return (f"thin test split: {n_neg} correct and {n_pos} hallucination labelled item(s), fewer than "
            f"evaluation.min_per_class = {minimum} per class; its numbers are not ranked (more items: --limit; more "
            "labels: an LLM judge, --judge-model)")


def carry_timings(run: DetectorRun, previous: dict[str, Any]) -> bool:
    """Cached scores without a timings record beside them (written by an older haldet): the fit/score seconds
    from this cell's entry in the earlier manifest, when that run computed them. False when it recorded none for
    these scores (the cost is then unknown, not zero)."""
    for entry in previous.get("detectors") or []:
        if entry.get("name") == run.name and entry.get("key") == run.key and entry.get("timing_known", True):
            run.fit_seconds = float(entry.get("fit_s") or 0.0)
            run.score_seconds = float(entry.get("score_s") or 0.0)
            return True
    return False


def guarded_cell(config: RunConfig, store: RunStore, dataset: str, model: str, progress: Progress,
                 backends: dict[str, Backend], previous: dict[str, Any] | None, *,
                 raise_errors: bool) -> CellResult:
    """`run_cell`, with a failure turned into a cell carrying its error (unless `raise_errors`)."""
    try:
        return run_cell(config, store, dataset, model, progress, backends, previous=previous)
    except HaldetError as exc:
        if raise_errors:
            raise
        return CellResult(dataset=dataset, scenario=scenario_of(dataset), model=model, error=exc.message)
    except Exception as exc:  # any other failure of one cell is reported; the other cells still run
        if raise_errors or is_storage_error(exc):  # a full or read-only disk fails every cell: stop
            raise
        cell = CellResult(dataset=dataset, scenario=scenario_of(dataset), model=model,
                          error=f"{type(exc).__name__}: {exc}")
        cell.data["traceback"] = traceback.format_exc(limit=8)
        return cell


def scenario_of(dataset: str) -> str:
    try:
        return str(DATASETS.get(dataset, where="--dataset").scenario)
    except HaldetError:
        return "?"
