"""`haldet annotate RUN_DIR`: (re)label an existing run's answers, optionally compare two judges, and render
the label and agreement tables. Command orchestration lives here, not in the stage (`haldet.stages.annotate`), so
the stage never imports the run flow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from haldet.backends.openai_client import accumulate_usages
from haldet.config import JudgeConfig, RunConfig
from haldet.errors import HaldetError, UnknownNameError
from haldet.flow.cell import prepare_cell
from haldet.flow.run import check_judge_models, judged_task_types
from haldet.judges.agreement import agreement
from haldet.judges.cascade import Cascade
from haldet.schema import Category
from haldet.stages.annotate import FAILED, AnnotateStage, labels_of
from haldet.stages.base import no_progress
from haldet.stages.generate import GenerateStage, generation_of
from haldet.store import RunStore, clean_stale_temps
from haldet.util.locking import notify


def judge_config_with(base: JudgeConfig, overrides: dict[str, Any], where: str = "judge options") -> JudgeConfig:
    """`base` with the given (non-None) settings replaced, validated; a bad value is a user error."""
    data = {**base.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return JudgeConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise HaldetError(f"invalid judge setting {'.'.join(map(str, first['loc']))!r}: {first['msg']}",
                          where=where, hint="see `haldet annotate --help` and docs/judges.md") from None


def annotate_run(run_dir: Any, overrides: dict[str, Any] | None = None, *, compare_with: str | None = None,
                 datasets: list[str] | None = None, progress: Any = None) -> list[dict[str, Any]]:
    """Label every generated answer of an existing run with the chosen judge (resuming: only unlabelled items
    and earlier failures are judged), store the label distribution per dataset and judge in the manifest, and
    with `compare_with` also label with that judge kind and report the agreement of the two."""
    store = RunStore(Path(run_dir))
    no_run = HaldetError("no haldet run in this directory (no manifest.json with a config)", where=str(run_dir),
                         hint="run `haldet run --out DIR` first, then `haldet annotate DIR`")
    if not store.manifest_path.exists():
        raise no_run  # before taking the lock, which would create the directory
    with store.lock():  # one command at a time per run: a second annotate waits, then judges nothing twice
        for path in clean_stale_temps(store.root):
            notify(f"removed {path}, a temporary file left by an interrupted write")
        return _annotate(store, no_run, overrides, compare_with, datasets, progress)


def _annotate(store: RunStore, no_run: HaldetError, overrides: dict[str, Any] | None, compare_with: str | None,
              datasets: list[str] | None, progress: Any) -> list[dict[str, Any]]:
    """annotate_run's work, under the run lock."""
    manifest = store.read_manifest()
    if not manifest or "config" not in manifest:
        raise no_run
    config = RunConfig.model_validate(manifest["config"])
    judge = judge_config_with(config.judge, overrides or {})
    other = None
    if compare_with is not None:
        if compare_with not in ("rule", "exec", "llm", "cascade"):
            raise UnknownNameError("judge kind", compare_with, ["rule", "exec", "llm", "cascade"],
                                   where="--compare-with")
        other = judge.model_copy(update={"kind": compare_with})
        if other == judge:
            raise HaldetError("--compare-with names the judge already selected", where="--compare-with",
                              hint="compare two different judge kinds, e.g. --judge cascade --compare-with rule")
    wanted = datasets or config.datasets
    unknown = [d for d in wanted if d not in config.datasets]
    if unknown:
        raise HaldetError(f"dataset(s) {', '.join(unknown)} are not part of this run", where="--dataset",
                          hint=f"this run has: {', '.join(config.datasets)}")
    # a judge's local model that is not here: one message now, not a failure per item after the others were judged
    for chosen in [judge] if other is None else [judge, other]:
        check_judge_models(Cascade.from_config(chosen, config.templates), judged_task_types(config, wanted))
    backends: dict[str, Any] = {}
    reports: list[dict[str, Any]] = []
    for model in config.models:
        for dataset in wanted:
            _, ctx, items = prepare_cell(config, store, dataset, model, progress or no_progress, backends)
            gens = GenerateStage(ctx).records(items)
            ready = []
            for item in items:
                if item.id in gens:
                    item.generation = generation_of(gens[item.id])
                    ready.append(item)
            stage = AnnotateStage(ctx, judge)
            labels = labels_of(stage.ensure(ready))
            report: dict[str, Any] = {"dataset": dataset, "model": model, "n_items": len(items),
                                      "n_without_generation": len(items) - len(ready),
                                      "failures_file": str(ctx.store.log(FAILED).path) if stage.failures else None,
                                      **stage.summary(labels)}
            if other is not None:
                second = AnnotateStage(ctx, other)
                labels_b = labels_of(second.ensure(ready))
                report["compare"] = second.summary(labels_b)
                report["agreement"] = agreement(labels, labels_b, judge_a=judge.kind, judge_b=other.kind).as_dict()
                report["agreement_binary"] = agreement(labels, labels_b, binary=True, judge_a=judge.kind,
                                                       judge_b=other.kind).as_dict()
            reports.append(report)
            cell_entry = manifest.setdefault("annotation", {}).setdefault(f"{dataset}|{model}", {})
            cell_entry[judge.kind] = _entry(report, cell_entry.get(judge.kind))
            if other is not None:
                cell_entry[other.kind] = _entry(report["compare"], cell_entry.get(other.kind))
                cell_entry[f"agreement:{judge.kind}~{other.kind}"] = report["agreement"]
            store.write_manifest(manifest)
    return reports


def _entry(report: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """A judge's manifest entry: labels and failures as they stand now, usage summed over every invocation."""
    entry = {k: report[k] for k in ("by_judge", "total", "failed", "usage")}
    entry["usage"] = accumulate_usages((previous or {}).get("usage"), report["usage"])
    return entry


def render_reports(reports: list[dict[str, Any]]) -> list[Any]:
    """Rich tables for `haldet annotate`: labels per judge, failures and cost, agreement + confusion table."""
    from rich.table import Table

    cats = [c.value for c in Category]
    out: list[Any] = []
    for rep in reports:
        title = f"{rep['dataset']} | {rep['model']}: labels by judge ({rep['kind']})"
        table = Table(title=title)
        table.add_column("judge")
        for c in cats:
            table.add_column(c, justify="right")
        for judge_id, counts in rep["by_judge"].items():
            table.add_row(judge_id, *(str(counts.get(c, 0)) for c in cats))
        table.add_row("[bold]total[/bold]", *(f"[bold]{rep['total'].get(c, 0)}[/bold]" for c in cats))
        out.append(table)
        notes = []
        if rep["failed"]:
            notes.append(f"[red]{rep['failed']} item(s) failed after all retries[/red] -> {rep['failures_file']} "
                         "(rerun to retry only those)")
        if rep["n_without_generation"]:
            notes.append(f"{rep['n_without_generation']} item(s) have no generated answer yet (run `haldet run`)")
        for judge_id, usage in rep["usage"].items():
            cost = "unknown cost" if usage["cost_usd"] is None else f"${usage['cost_usd']:.4f}"
            notes.append(f"{judge_id}: {usage['calls']} calls, {usage['retries']} retries, "
                         f"{usage['prompt_tokens']}+{usage['completion_tokens']} tokens, {cost}, "
                         f"{usage['seconds']:.1f}s")
        out += notes
        for key in ("agreement", "agreement_binary"):
            agr = rep.get(key)
            if not agr:
                continue
            kappa = "n/a" if agr["kappa"] is None else f"{agr['kappa']:.3f}"
            observed = "n/a" if agr["observed_agreement"] is None else f"{agr['observed_agreement']:.3f}"
            scope = "all categories" if key == "agreement" else "correct/hallucination only"
            conf = Table(title=f"{agr['judge_a']} (rows) vs {agr['judge_b']} (columns), {scope}: "
                               f"Cohen's kappa {kappa}, agreement {observed}, n={agr['n']}")
            conf.add_column("")
            for c in agr["categories"]:
                conf.add_column(c, justify="right")
            for c, row in zip(agr["categories"], agr["confusion"], strict=True):
                conf.add_row(c, *(str(v) for v in row))
            out.append(conf)
    return out
