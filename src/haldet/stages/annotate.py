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
from haldet.schema import Generation, Label
from haldet.stages.base import STAGES, CellContext, Item, Stage
from haldet.store import StageLog, atomic_write_text

FAILED = "annotate.failed"
_CHEAP_PREFIX = "rule:"
_FLUSH_EVERY = 64


def _generated(item: Item) -> Generation:
    """The item's generation (annotation runs after the generate stage, so every item has one)."""
    if item.generation is None:
        raise RuntimeError(f"{item.id}: annotation before generation")
    return item.generation


@STAGES.register("annotate")
class AnnotateStage(Stage):

    def __init__(self, ctx: CellContext, judge: JudgeConfig | None = None, cascade: Cascade | None = None) -> None:
        super().__init__(ctx)
        self.judge_config = judge or ctx.config.judge
        self.cascade = cascade or Cascade.from_config(self.judge_config, ctx.config.templates,
                                                      see_reasoning=ctx.config.reasoning.judges_see_reasoning)
        self._fingerprint = self.cascade.fingerprint()
        self.failures: dict[str, dict[str, Any]] = {}

    def key(self, item: Item) -> str:
        assert item.generation is not None
        return stage_key(self.name, self._fingerprint, item.instance.model_dump(mode="json"),
                         item.generation.response, item.generation.finish_reason)

    def ensure(self, items: Sequence[Item]) -> dict[str, dict[str, Any]]:
        """Label the items without a current-key label (new ones and earlier failures); return all labels.
        Holds the cell's annotate lock: a second process waits, then judges only what is still unlabelled."""
        items = [item for item in items if item.generation is not None]
        failed_log = self.ctx.store.log(FAILED)
        with self.ctx.store.lock(self.name):
            done = self.records(items)
            todo = [item for item in items if item.id not in done]
            self.ctx.counts.stage(self.name).computed = len(todo)
            if todo:
                self._judge(todo, done, failed_log)
            self._rewrite_failures(failed_log, items, done)
        return done

    def _judge(self, todo: list[Item], done: dict[str, dict[str, Any]], failed_log: StageLog) -> None:
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
            self.cascade.judge_many([(item.instance, _generated(item)) for item in todo], on_done)
        finally:
            flush()
            self.ctx.timings[self.name] = self.ctx.timings.get(self.name, 0.0) + time.perf_counter() - start
        self.ctx.counts.stage(self.name).failed = len(self.failures)

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
