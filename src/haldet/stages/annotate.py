"""The `annotate` stage: a label for every generated answer, from the judge cascade (docs/judges.md).

Records go to `annotate.jsonl` as `{id, key, category, reasoning, judge, spans}` the moment each label exists
(labels from judges that cost time or money, execution and LLM, are appended one by one; cheap rule labels in
small batches), so a crash loses at most the item in flight. Items a judge could not label after all its
retries go to `annotate.failed.jsonl` (`{id, key, judge, error, attempts, at}`) and get no label; a rerun finds
them unlabelled and retries exactly those, and the failures file is rewritten to hold only what still fails.
The key covers the judge chain's fingerprint (judges, models, templates, thresholds), the instance and the
response, so a changed judge relabels and labels of other judges stay on disk for agreement checks.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Sequence
from typing import Any

from haldet.config import JudgeConfig, stage_key
from haldet.judges.base import JudgeFailure
from haldet.judges.cascade import Cascade, Outcome
from haldet.schema import Label
from haldet.stages.base import CellContext, Item, Stage
from haldet.store import StageLog, atomic_write_text

FAILED = "annotate.failed"
_CHEAP_PREFIX = "rule:"
_FLUSH_EVERY = 64


class AnnotateStage(Stage):
    name = "annotate"

    def __init__(self, ctx: CellContext, judge: JudgeConfig | None = None, cascade: Cascade | None = None) -> None:
        super().__init__(ctx)
        self.judge_config = judge or ctx.config.judge
        self.cascade = cascade or Cascade.from_config(self.judge_config)
        self._fingerprint = self.cascade.fingerprint()
        self.failures: dict[str, dict[str, Any]] = {}

    def key(self, item: Item) -> str:
        assert item.generation is not None
        return stage_key(self.name, self._fingerprint, item.instance.model_dump(mode="json"),
                         item.generation.response, item.generation.finish_reason)

    def ensure(self, items: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """Label the items without a current-key label (new ones and earlier failures); return all labels."""
        items = [item for item in items if item.generation is not None]
        done = self.records(items)
        todo = [item for item in items if item.id not in done]
        self.ctx.counts[f"{self.name}_computed"] = len(todo)
        failed_log = self.ctx.store.log(FAILED)
        if not todo:
            self._rewrite_failures(failed_log, items, done)
            return done
        start = time.perf_counter()
        advance = self.ctx.progress(f"{self.name} [{self.ctx.dataset} | {self.ctx.model}]", len(todo))
        log = self.ctx.store.log(self.name)
        keys = {item.id: self.key(item) for item in todo}
        buffer: list[dict[str, Any]] = []

        def flush() -> None:
            log.append(buffer)
            buffer.clear()

        def on_done(index: int, outcome: Outcome) -> None:
            item = todo[index]
            if isinstance(outcome, JudgeFailure):
                rec = {"id": item.id, "key": keys[item.id], "judge": outcome.judge, "error": outcome.error,
                       "attempts": outcome.attempts, "at": _now()}
                failed_log.append([rec])
                self.failures[item.id] = rec
            else:
                rec = outcome.model_dump(mode="json")
                rec["key"] = keys[item.id]
                done[item.id] = rec
                buffer.append(rec)
                if not outcome.judge.startswith(_CHEAP_PREFIX) or len(buffer) >= _FLUSH_EVERY:
                    flush()
            advance(1)

        try:
            self.cascade.judge_many([(item.instance, item.generation) for item in todo  # type: ignore[misc]
                                     ], on_done)
        finally:
            flush()
            self.ctx.timings[self.name] = self.ctx.timings.get(self.name, 0.0) + time.perf_counter() - start
        self.ctx.counts[f"{self.name}_failed"] = len(self.failures)
        self._rewrite_failures(failed_log, items, done)
        return done

    def _rewrite_failures(self, failed_log: StageLog, items: Sequence[Item], done: dict[str, Any]) -> None:
        """Keep only failures that still stand: the latest per (id, key), minus items labelled since."""
        path = failed_log.path
        if not path.exists():
            return
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for rec in _read_lines(path):
            latest[(rec["id"], rec["key"])] = rec
        current = {item.id: self.key(item) for item in items}
        keep = [rec for (i, k), rec in latest.items() if not (i in done and current.get(i) == k)]
        atomic_write_text(path, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in keep))

    def summary(self, labels: dict[str, Label]) -> dict[str, Any]:
        """Label distribution per judge and overall, failures, and the cost of model-calling judges."""
        return {"kind": self.judge_config.kind, "by_judge": label_distribution(labels),
                "total": category_counts(labels), "failed": len(self.failures),
                "usage": self.cascade.usage()}


def _read_lines(path: Any) -> list[dict[str, Any]]:
    out = []
    with open(path, "rb") as fh:
        for raw in fh.read().split(b"\n"):
            if raw.strip():
                try:
                    out.append(json.loads(raw))
                except json.JSONDecodeError:
                    continue  # a line cut by a kill: that failure is simply retried
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def labels_of(records: dict[str, dict[str, Any]]) -> dict[str, Label]:
    fields = set(Label.model_fields)
    return {i: Label.model_validate({k: v for k, v in r.items() if k in fields}) for i, r in records.items()}


def category_counts(labels: dict[str, Label]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for lab in labels.values():
        counts[lab.category.value] = counts.get(lab.category.value, 0) + 1
    return counts


def label_distribution(labels: dict[str, Label]) -> dict[str, dict[str, int]]:
    """{judge id: {category: count}}."""
    out: dict[str, dict[str, int]] = {}
    for lab in labels.values():
        per = out.setdefault(lab.judge, {})
        per[lab.category.value] = per.get(lab.category.value, 0) + 1
    return {j: dict(sorted(c.items())) for j, c in sorted(out.items())}


# --- `haldet annotate RUN_DIR`: (re)label an existing run, optionally compare two judges -----------------------
def judge_config_with(base: JudgeConfig, overrides: dict[str, Any], where: str = "judge options") -> JudgeConfig:
    """`base` with the given (non-None) settings replaced, validated; a bad value is a user error."""
    from pydantic import ValidationError

    from haldet.errors import HaldetError

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
    from pathlib import Path

    from haldet.config import RunConfig
    from haldet.errors import HaldetError
    from haldet.judges.agreement import agreement
    from haldet.pipeline import prepare_cell
    from haldet.stages.base import no_progress
    from haldet.stages.generate import GenerateStage, generation_of
    from haldet.store import RunStore

    store = RunStore(Path(run_dir))
    manifest = store.read_manifest()
    if not manifest or "config" not in manifest:
        raise HaldetError("no haldet run in this directory (no manifest.json with a config)", where=str(run_dir),
                          hint="run `haldet run --out DIR` first, then `haldet annotate DIR`")
    config = RunConfig.model_validate(manifest["config"])
    judge = judge_config_with(config.judge, overrides or {})
    other = None
    if compare_with is not None:
        if compare_with not in ("rule", "exec", "llm", "cascade"):
            raise HaldetError(f"unknown judge kind {compare_with!r}", where="--compare-with",
                              hint="one of rule, exec, llm, cascade")
        other = judge.model_copy(update={"kind": compare_with})
        if other == judge:
            raise HaldetError("--compare-with names the judge already selected", where="--compare-with",
                              hint="compare two different judge kinds, e.g. --judge cascade --compare-with rule")
    wanted = datasets or config.datasets
    unknown = [d for d in wanted if d not in config.datasets]
    if unknown:
        raise HaldetError(f"dataset(s) {', '.join(unknown)} are not part of this run", where="--dataset",
                          hint=f"this run has: {', '.join(config.datasets)}")
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
    from haldet.backends.openai_client import accumulate_usages

    entry = {k: report[k] for k in ("by_judge", "total", "failed", "usage")}
    entry["usage"] = accumulate_usages((previous or {}).get("usage"), report["usage"])
    return entry


def render_reports(reports: list[dict[str, Any]]) -> list[Any]:
    """Rich tables for `haldet annotate`: labels per judge, failures and cost, agreement + confusion table."""
    from rich.table import Table

    from haldet.schema import Category

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
