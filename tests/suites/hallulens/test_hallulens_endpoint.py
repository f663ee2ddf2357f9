"""HalluLens end to end against a local OpenAI-compatible mock server (127.0.0.1, started here): construction
with an endpoint generator (seeded and cached: a rebuild makes no call), target answers from the endpoint, the
judges (bare "CORRECT." replies parsed, 500s retried, a judge call that keeps failing listed and retried on the
next run, never labelled), rates with C = (1-FR)(1-H), Table 2 output, detection sets."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from haldet.config import JudgeConfig
from haldet.suites.hallulens.build import PLACES, BuildConfig
from haldet.suites.hallulens.evaluate import evaluate
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.prompts import Prompts
from haldet.suites.hallulens.sets import build_sets, read_items
from haldet.suites.hallulens.target import Target
from mock_openai import FakeOpenAI
from repo_paths import FIXTURES

FIX = FIXTURES / "hallulens"


ANSWERS = {  # what the mock *target* model says, by the page the question is about (the 6 hardest deciles kept)
    "Voynich manuscript": "The Voynich manuscript.",       # gold stated -> rule: correct
    "Battle of Hastings": "I don't know.",                 # refusal -> rule: abstained
    "Trans-Siberian Railway": "Possibly the Coral Sea.",   # LLM: answers; judged "CORRECT." (bare label)
    "Ada Lovelace": "It was in Rome.",                     # LLM judge: 500s, then (rerun) "**Incorrect**"
    "Lake Baikal": "I have no idea, sorry.",               # refusal
    "Johannes Gutenberg": "Johannes Gutenberg, I think.",  # gold stated
}


FAILING = "Rome"  # the correctness judge call about this answer gets 500s (plan of key "judge/fail")


def key_of(body: dict[str, Any]) -> str:
    text = body["messages"][-1]["content"]
    failing = "Judge whether a reply answers" in text and FAILING in text
    return body["model"] + ("/fail" if failing else "")


class Behaviour:
    """The mock's replies: generator, target and judge, told apart by the prompt text."""

    def __init__(self) -> None:
        self.names = 0

    def __call__(self, arg: str, body: dict[str, Any], j: int) -> str:
        return self.reply(body["messages"][-1]["content"])

    def reply(self, text: str) -> str:
        if "write one question about it" in text:
            title = re.search(r'article "([^"]+)"', text).group(1)  # type: ignore[union-attr]
            return json.dumps({"question": f"What is one fact about {title}?"})
        if "Give the answer as a single word" in text:
            title = re.search(r"fact about (.+)\?", text).group(1)  # type: ignore[union-attr]
            if title == "Tardigrade":
                return '{"answerable": false, "answer": ""}'
            if title == "Great Barrier Reef":  # a gold answer over 10 words is dropped
                return json.dumps({"answerable": True, "answer": "the largest coral reef system in the world, "
                                                                 "off the coast of Queensland"})
            return json.dumps({"answerable": True, "answer": title})
        if "calls for an answer of a" in text:
            title = re.search(r'article "([^"]+)"', text).group(1)  # type: ignore[union-attr]
            return json.dumps({"question": f"Describe the history of {title}."})
        if "answer it in one paragraph" in text:
            facts = " ".join(f"The {n} fact is here." for n in ("first", "second", "third", "fourth"))
            return json.dumps({"answerable": True, "answer": facts})
        if "Suggest" in text and "names" in text:
            self.names += 1
            return json.dumps({"names": [f"Quorvex {self.names}a", f"Quorvex {self.names}b"]})
        if "Decide whether the chatbot declines" in text:
            return json.dumps({"reasoning": "It answers.", "abstains": False})
        if "Judge whether a reply answers" in text:
            return "CORRECT." if "Coral Sea" in text else "**Incorrect**"
        if "which does not exist" in text:
            return json.dumps({"reasoning": "Describes it.", "believes": "Quorvex" in text})
        if "Break the marked sentence" in text:
            sentence = text.split("Sentence:", 1)[1].split("\n")[0].strip()
            return json.dumps({"claims": [sentence]})
        if "supported by the passages" in text:
            return json.dumps({"reasoning": "r", "supported": "1903" in text.split("Claim:", 1)[1]})
        # the target model
        for title, answer in ANSWERS.items():
            if title in text:
                return answer
        if text.startswith("Describe the history of"):
            return "Marie Curie won the Nobel Prize in Physics in 1903. She was born on the Moon."
        return "It is a small company that makes things."


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(content=Behaviour(), key_of=key_of) as srv:
        srv.plans["judge/fail"] = ["500"]
        yield srv


def llm(srv: FakeOpenAI, model: str, cache: Path | None) -> StructuredLLM:
    return StructuredLLM(JudgeConfig(backend="openai", model=model, base_url=srv.base_url, retries=1, backoff=0.0,
                                     json_mode=False), cache=cache)


def test_build_and_evaluate_through_an_endpoint(server: FakeOpenAI, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    srv = server
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    set_dir = tmp_path / "set"
    cfg = BuildConfig(seed=7, qa_size=10, long_size=1, long_deciles=[9], qa_min_tokens=80, qa_max_tokens=200,
                      long_min_tokens=100, long_max_tokens=200, mixed_per_domain=1,
                      generated={"business": 1, "event": 0, "product": 1}, names_per_call=2,
                      place_groups={p: ("low", "middle", "high")[k % 3] for k, p in enumerate(PLACES)})
    kwargs: dict[str, Any] = dict(tasks=["precisewikiqa", "longwiki", "nonexistent"], cfg=cfg, trials=2,
                                  prompts=Prompts(), pages=str(FIX / "pages.jsonl"),
                                  taxonomy=str(FIX / "taxonomy.csv"), medicines=str(FIX / "medicines.csv"))
    manifest = build_sets(set_dir, generators=[llm(srv, "gen", set_dir / "cache" / "llm.jsonl")], **kwargs)
    qa_items = read_items(set_dir / "seed-7" / "precisewikiqa.jsonl")
    # 10 pages, one per decile; the Tardigrade question is unanswerable, the Reef's gold answer too long, and
    # their deciles have no other page
    assert len(qa_items) == 8 and not {"Tardigrade", "Great Barrier Reef"} & {it.title for it in qa_items}
    assert manifest["reports"]["seed-7/precisewikiqa"]["dropped"] == {"unanswerable from the section": 1,
                                                                      "gold answer longer than 10 words": 1}
    assert any("decile 2: 0 of 1" in n for n in manifest["reports"]["seed-7/precisewikiqa"]["notes"])
    assert all(it.answer == it.title for it in qa_items)
    assert [it.decile for it in read_items(set_dir / "seed-7" / "longwiki.jsonl")] == [9]
    nonexistent = read_items(set_dir / "seed-8" / "nonexistent.jsonl")
    assert {(it.subtask, it.domain) for it in nonexistent} == {("mixed", "animal"), ("mixed", "plant"),
                                                               ("mixed", "bacteria"), ("mixed", "medicine"),
                                                               ("generated", "business"), ("generated", "product")}
    # seeded and cached: a rebuild gives the same files and asks the generator nothing
    before = {p.name: p.read_text() for p in (set_dir / "seed-7").iterdir()}
    calls = srv.calls["gen"]
    build_sets(set_dir, generators=[llm(srv, "gen", set_dir / "cache" / "llm.jsonl")], **kwargs)
    assert srv.calls["gen"] == calls
    assert {p.name: p.read_text() for p in (set_dir / "seed-7").iterdir()} == before

    out = tmp_path / "eval"
    judge = llm(srv, "judge", out / "judge_cache.jsonl")
    target = Target("openai:target", base_url=srv.base_url)
    res = evaluate(set_dir, out, targets=[target], judge=judge, prompts=Prompts(), limit=6)
    qa = res["models"]["openai:target"]["precisewikiqa"]
    for trial in qa["trials"].values():
        # Voynich, Gutenberg (rule correct), Hastings, Baikal (refused), Trans-Siberian (LLM "CORRECT."),
        # Lovelace (judge 500: not judged)
        assert trial["failed"] == 1 and trial["n"] == 5
        assert trial["false_refusal"] == pytest.approx(2 / 5)
        assert trial["hallucination"] == 0.0 and trial["correct"] == pytest.approx(3 / 5)
        assert trial["correct"] == pytest.approx((1 - trial["false_refusal"]) * (1 - trial["hallucination"]))
    failed = [json.loads(x) for x in (out / "openai_target" / "seed-7" / "precisewikiqa.failed.jsonl")
              .read_text().splitlines()]
    assert [f["step"] for f in failed] == ["correctness"] and "500" in failed[0]["error"]
    judged = {json.loads(x)["id"] for x in (out / "openai_target" / "seed-7" / "precisewikiqa.judged.jsonl")
              .read_text().splitlines()}
    assert failed[0]["id"] not in judged  # a failure is never a label
    lw = res["models"]["openai:target"]["longwiki"]["trials"]["seed-7"]
    # one response, two sentences, two claims, one supported: P = 1/2, R@32 = 1/32
    assert (lw["precision"], lw["recall_at_k"]) == (pytest.approx(0.5), pytest.approx(1 / 32))
    far = res["models"]["openai:target"]["nonexistent"]["trials"]["seed-7"]
    assert far["per_domain"]["generated/business"] == 1.0 and far["mixed"] == 0.0
    assert far["far"] == pytest.approx(0.5)
    assert "PWQA FR" in (out / "table.md").read_text()
    detection = [json.loads(x) for x in (out / "openai_target" / "detection" / "longwiki.jsonl").read_text()
                 .splitlines()]
    units = detection[0]["units"]
    assert [u["label"] for u in units] == ["correct", "hallucination"]
    response = detection[0]["response"]
    assert response[units[1]["start"]:units[1]["end"]] == "She was born on the Moon."

    # the endpoint recovers: a rerun retries exactly the failed judge call; everything else comes from caches
    srv.plans.clear()
    judge_calls = srv.calls["judge"] + srv.calls["judge/fail"]
    res2 = evaluate(set_dir, out, targets=[target], judge=llm(srv, "judge", out / "judge_cache.jsonl"),
                    prompts=Prompts(), limit=6)
    # the same request in both trials: asked once, then cached
    assert srv.calls["judge"] + srv.calls["judge/fail"] == judge_calls + 1
    trial = res2["models"]["openai:target"]["precisewikiqa"]["trials"]["seed-7"]
    assert trial["failed"] == 0 and trial["hallucination"] == pytest.approx(1 / 4)
    assert (trial["false_refusal"], trial["correct"]) == (pytest.approx(1 / 3), pytest.approx(1 / 2))
    summary = res2["models"]["openai:target"]["precisewikiqa"]["summary"]["hallucination"]
    assert summary["n_trials"] == 2 and summary["mean"] == pytest.approx(1 / 4) and summary["sd"] == 0.0

    # the command line on the same set: answers come from the cache, the table is printed
    from typer.testing import CliRunner

    from haldet.cli import app

    # ... with the preset recorded and LongWiki judged by its own model (the paper's per-task judges)
    from haldet.presets import load_preset

    lw_calls = srv.calls["judge_lw"]
    result = CliRunner().invoke(app, [
        "hallulens", "evaluate", "--set", str(set_dir), "--out", str(out), "--model", "openai:target",
        "--model-base-url", srv.base_url, "--judge-model", "judge", "--judge-base-url", srv.base_url,
        "--limit", "6", "--retries", "0", "--preset", "hallulens", "--task-judge", "longwiki=judge_lw"])
    assert result.exit_code == 0, result.output
    assert "HalluLens PreciseWikiQA" in result.output and "F1@32" in result.output
    assert "openai:target" in result.output
    saved = json.loads((out / "results.json").read_text())
    assert saved["judge"]["model"] == "judge" and saved["preset"] == load_preset("hallulens").record()
    assert saved["task_judges"]["longwiki"]["judge"]["model"] == "judge_lw"
    assert srv.calls["judge_lw"] > lw_calls  # the LongWiki steps asked judge_lw, the other tasks the cache of judge
    lw2 = saved["models"]["openai:target"]["longwiki"]["trials"]["seed-7"]
    assert (lw2["precision"], lw2["recall_at_k"]) == (pytest.approx(0.5), pytest.approx(1 / 32))
    bad = CliRunner().invoke(app, ["hallulens", "evaluate", "--set", str(set_dir), "--out", str(out), "--model",
                                   "openai:target", "--task-judge", "longwiky=judge_lw"])
    assert "not TASK=MODEL with a known task" in str(bad.exception)  # one HaldetError (exit 2 via the entry point)
    assert "Fig. 4: PreciseWikiQA per h-score decile" in (out / "report.html").read_text()
    assert '<figure id="fig-hallulens-fig4-deciles"><svg ' in (out / "report.html").read_text()
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["hallulens-fig4-deciles.pdf",
                                                                   "hallulens-fig4-deciles.png"]
    # Fig. 9: the business name's place carries its frequency group into the false acceptance per group
    (business,) = [it for it in nonexistent if it.domain == "business"]
    group = business.meta["place_group"]
    by_group = saved["models"]["openai:target"]["nonexistent"]["by_place_group"]
    assert group in ("low", "middle", "high") and by_group[group]["n"] == 1 and by_group[group]["far"]["mean"] == 1.0
    assert "Fig. 9: GeneratedEntities false acceptance" in (out / "table.md").read_text()
    assert "Fig. 9: GeneratedEntities false acceptance" in (out / "report.html").read_text()
    # Kendall's tau needs 3 models: three endpoint models that answer alike tie on every metric, so each tau is
    # undefined and says why, in results.json, table.md and report.html (all written; answers and judge cached)
    three = evaluate(set_dir, tmp_path / "eval3", targets=[Target(f"openai:target{k}", base_url=srv.base_url)
                                                           for k in (1, 2, 3)],
                     judge=llm(srv, "judge", out / "judge_cache.jsonl"), prompts=Prompts(), limit=6,
                     tasks=["precisewikiqa", "nonexistent"])
    assert three["kendall"] and all(r["n_models"] == 3 and r["tau"] is None and r["note"].startswith(
        "undefined: every model has the same") for r in three["kendall"])
    assert "Kendall's tau" in (tmp_path / "eval3" / "table.md").read_text()
    assert "<td>n/a</td><td>n/a</td><td>3</td>" in (tmp_path / "eval3" / "report.html").read_text()
