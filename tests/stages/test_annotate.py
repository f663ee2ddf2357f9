"""The annotate stage: incremental labels, the failures file, reruns that retry only failures, no invented labels,
a crash that keeps what was written; `haldet run` + `haldet annotate` end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from haldet.backends.base import Backend
from haldet.config import JudgeConfig, RunConfig
from haldet.errors import HaldetError
from haldet.schema import Category, Generation, Instance
from haldet.stages.annotate import FAILED, AnnotateStage, labels_of
from haldet.stages.base import CellContext, Item
from haldet.store import CellStore
from mock_openai import FakeOpenAI


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    srv = FakeOpenAI(slow_seconds=1.0)
    yield srv
    srv.close()


def no_backend() -> Backend:
    raise AssertionError("annotate must not need the target model")


def make_ctx(tmp_path: Path, judge: JudgeConfig) -> CellContext:
    config = RunConfig(judge=judge)
    return CellContext(config=config, dataset="t", model="m", store=CellStore(tmp_path / "cell"),
                       backend_factory=no_backend)


def make_items(answers: list[str], task_type: str = "summarization") -> list[Item]:
    items = []
    for n, answer in enumerate(answers):
        inst = Instance(id=f"t/test/{n}", dataset="t", scenario="s", task_type=task_type, context="A document.",
                        question="Summarise.", references=["A reference summary."])
        gen = Generation(id=inst.id, prompt="p", response=answer, token_ids=[], token_logprobs=[],
                         finish_reason="stop", n_tokens=0, model="m")
        items.append(Item(instance=inst, prompt="p", generation=gen))
    return items


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def llm_judge(server: FakeOpenAI, **kw: Any) -> JudgeConfig:
    return JudgeConfig(**{"kind": "cascade", "base_url": server.base_url, "model": "judge-test", "retries": 2,
                          "backoff": 0.01, "timeout": 0.5, "concurrency": 3, **kw})


def test_failures_file_and_rerun_retries_only_failures(tmp_path: Path, server: FakeOpenAI) -> None:
    server.reset()
    server.plans.update({"s-ok": ["ok:correct"], "s-flaky": ["500", "ok:hallucination"], "s-down": ["500"],
                         "s-junk": ["garbage"], "s-slow": ["slow", "ok:correct"]})
    ctx = make_ctx(tmp_path, llm_judge(server))
    items = make_items(list(server.plans))
    stage = AnnotateStage(ctx)
    labels = labels_of(stage.ensure(items))
    ids = {it.generation.response: it.id for it in items}  # type: ignore[union-attr]
    assert set(labels) == {ids["s-ok"], ids["s-flaky"], ids["s-slow"]}  # nothing invented for the failures
    assert labels[ids["s-flaky"]].category is Category.HALLUCINATION
    assert all(lab.judge == "llm:judge-test" for lab in labels.values())
    failed = read_jsonl(ctx.store.root / f"{FAILED}.jsonl")
    assert sorted(r["id"] for r in failed) == sorted([ids["s-down"], ids["s-junk"]])
    assert all(r["attempts"] == 3 and r["judge"] == "llm:judge-test" for r in failed)
    written = read_jsonl(ctx.store.root / "annotate.jsonl")
    assert len(written) == 3 and all(r["category"] != "invalid" for r in written)
    summary = stage.summary(labels)
    assert summary["failed"] == 2 and summary["by_judge"] == {"llm:judge-test": {"correct": 2, "hallucination": 1}}

    # the endpoint recovers: a rerun judges exactly the two failures, and the failures file empties
    server.plans.update({"s-down": ["ok:abstention"], "s-junk": ["ok:correct"]})
    before = dict(server.calls)
    again = AnnotateStage(ctx)
    labels2 = labels_of(again.ensure(items))
    asked = {a for a in server.calls if server.calls[a] > before.get(a, 0)}
    assert asked == {"s-down", "s-junk"}
    assert len(labels2) == 5 and labels2[ids["s-down"]].category is Category.ABSTENTION
    assert read_jsonl(ctx.store.root / f"{FAILED}.jsonl") == []
    assert ctx.counts["annotate_computed"] == 2

    # a third run has nothing to do
    calls = sum(server.calls.values())
    AnnotateStage(ctx).ensure(items)
    assert sum(server.calls.values()) == calls and ctx.counts["annotate_computed"] == 0


def test_crash_mid_run_keeps_written_labels(tmp_path: Path, server: FakeOpenAI) -> None:
    server.reset()
    answers = [f"c-{i}" for i in range(5)]
    server.plans.update({a: ["ok:correct"] for a in answers})
    server.plans["c-3"] = ["401"]  # a fatal error stops the run at the 4th item
    ctx = make_ctx(tmp_path, llm_judge(server, concurrency=1))
    items = make_items(answers)
    with pytest.raises(HaldetError, match="401"):
        AnnotateStage(ctx).ensure(items)
    kept = read_jsonl(ctx.store.root / "annotate.jsonl")
    assert [r["id"] for r in kept] == [items[0].id, items[1].id, items[2].id]
    server.plans["c-3"] = ["ok:hallucination"]
    before = dict(server.calls)
    labels = labels_of(AnnotateStage(ctx).ensure(items))
    assert {a for a in server.calls if server.calls[a] > before.get(a, 0)} == {"c-3", "c-4"}
    assert len(labels) == 5 and len(read_jsonl(ctx.store.root / "annotate.jsonl")) == 5


def test_rule_only_run_marks_undecidable_invalid_and_changes_key(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, JudgeConfig(kind="rule"))
    items = make_items(["A summary."])
    labels = labels_of(AnnotateStage(ctx).ensure(items))
    assert labels[items[0].id].category is Category.INVALID
    assert "no configured judge" in labels[items[0].id].reasoning
    # another judge kind gets its own key: both label sets stay on disk
    other = AnnotateStage(ctx, JudgeConfig(kind="exec"))
    assert other.key(items[0]) != AnnotateStage(ctx).key(items[0])


# --- end to end on the embedded model -----------------------------------------------------------------------
@pytest.mark.slow
def test_run_then_annotate_with_compare(tmp_path: Path, cli: Any, server: FakeOpenAI) -> None:
    server.reset()
    out = tmp_path / "run"
    res = cli("run", "--dataset", "halueval_qa", "--limit", "4", "--max-new-tokens", "8", "--batch-size", "4",
              "--detector", "perplexity", "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "labels by judge" in res.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    cell = manifest["cells"][0]
    assert sum(cell["annotation"]["total"].values()) == 4
    assert set(cell["annotation"]["by_judge"]) <= {"rule:short_answer", "rule:reference_similarity", "cascade"}

    res = cli("annotate", str(out), "--judge", "cascade", "--compare-with", "llm", "--judge-model", "judge-test",
              "--judge-base-url", server.base_url, "--judge-retries", "1", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    reports = json.loads(res.stdout)
    rep = reports[0]
    # the cascade with an LLM judge: rule decides what it can, the LLM the rest (the fake server says correct)
    assert sum(rep["total"].values()) == 4 and rep["failed"] == 0
    assert rep["compare"]["by_judge"] == {"llm:judge-test": {"correct": 4}}
    assert rep["agreement"]["n"] == 4 and sum(map(sum, rep["agreement"]["confusion"])) == 4
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["annotation"]["halueval_qa|smollm2-135m"]
    assert {"cascade", "llm", "agreement:cascade~llm"} <= set(entry)

    # human-readable output, and a bad option is one clear message
    res = cli("annotate", str(out), "--judge", "rule", "--compare-with", "cascade")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Cohen's kappa" in res.stdout
    res = cli("annotate", str(out), "--judge", "sometimes")
    assert res.returncode == 2 and "invalid judge setting" in res.stderr and "Traceback" not in res.stderr
    res = cli("annotate", str(tmp_path / "nothing"))
    assert res.returncode == 2 and "no haldet run" in res.stderr


def test_llm_judge_without_model_fails_before_any_work() -> None:
    from haldet.flow.run import validate_names

    with pytest.raises(HaldetError, match="needs a model"):
        validate_names(RunConfig(judge=JudgeConfig(kind="llm")))
    with pytest.raises(HaldetError, match="template directory"):
        validate_names(RunConfig(judge=JudgeConfig(kind="cascade", model="m", template_dir="/nonexistent/x")))
