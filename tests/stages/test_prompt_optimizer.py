"""The prompt-optimised judge (TRIVIA+'s PO): the loop on known judges, and the verdict stage against the endpoint
mock (final instructions, test items never shown to the optimiser, test labels never read, cached outcome)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from haldet.config import RunConfig
from haldet.detectors.llm_judge import FAITHFUL, HALLUCINATION
from haldet.errors import HaldetError
from haldet.flow.scoring import make_detector
from haldet.schema import Generation, Instance
from haldet.stages.base import CellContext, Item
from haldet.stages.prompt_optimizer import (
    Mistake,
    Optimize,
    objective_score,
    optimize_instructions,
    parse_instructions,
)
from haldet.stages.verdict import OPTIMIZED_FILE, VerdictStage
from haldet.store import RunStore
from haldet.text.templates import template_text
from mock_openai import FakeOpenAI
from repo_paths import FIXTURES

TEXTS = {n: template_text(n) for n in ("po_optimizer_system", "po_optimizer_user")}
RULE = "Flag every answer that says wrong."


def test_objectives_by_hand() -> None:
    y, p = [1, 1, 0, 0, 0], [1, None, 0, 1, 0]  # None: no verdict, counted as wrong
    assert objective_score("accuracy", y, p) == pytest.approx(3 / 5)
    assert objective_score("balanced_accuracy", y, p) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert objective_score("f1", y, p) == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))
    assert objective_score("balanced_accuracy", [0, 0], [0, 1]) == pytest.approx(0.5)  # one class: accuracy
    assert objective_score("accuracy", [], []) is None


@pytest.mark.parametrize(("reply", "expected"), [
    ("<INSTRUCTIONS>Be careful.</INSTRUCTIONS>", "Be careful."),
    ("draft <INSTRUCTIONS>a</INSTRUCTIONS> final <instructions>\n b \n</Instructions>", "b"),
    ("<INSTRUCTIONS>cut off", None), ("<INSTRUCTIONS> </INSTRUCTIONS>", None), ("no tags", None),
])
def test_instructions_parser(reply: str, expected: str | None) -> None:
    text, why = parse_instructions(reply)
    assert text == expected and (why == "") == (expected is not None)


def _loop(seed: int, rewrites: list[str | None], rounds: int = 3) -> tuple[Any, list[list[dict[str, str]]]]:
    """A judge that is right on every item under instructions containing RULE and says 'faithful' otherwise."""
    labels = {f"i{k}": int(k % 2 == 0) for k in range(12)}
    train = {i: y for i, y in labels.items() if int(i[1:]) < 8}
    val = {i: y for i, y in labels.items() if int(i[1:]) >= 8}
    chats: list[list[dict[str, str]]] = []

    def judge(instructions: str, ids: Any) -> dict[str, tuple[int | None, str]]:
        return {i: (labels[i] if RULE in instructions else 0, f"reasoning on {i}") for i in ids}

    def rewrite(chat: list[dict[str, str]]) -> str | None:
        chats.append(chat)
        return rewrites.pop(0) if rewrites else None

    def mistake(i: str, reply: str) -> Mistake:
        inst = Instance(id=f"d/x/{i}", dataset="d", scenario="rag", task_type="rag", context=f"doc {i}", question="q?")
        return Mistake(inst, f"answer {i}", reply, HALLUCINATION)

    outcome = optimize_instructions("Judge faithfulness.", judge=judge, rewrite=rewrite, mistake=mistake,
                                    train=train, val=val, settings=Optimize(rounds=rounds, feedback=2), seed=seed,
                                    texts=TEXTS)
    return outcome, chats


def test_the_loop_keeps_only_a_rewrite_better_on_validation_and_stops_when_nothing_is_wrong() -> None:
    worse = "<INSTRUCTIONS>Say faithful.</INSTRUCTIONS>"
    better = f"<INSTRUCTIONS>{RULE}</INSTRUCTIONS>"
    outcome, chats = _loop(0, [worse, "no tags at all", better])
    # start: everything judged faithful -> balanced accuracy 0.5; the worse rewrite ties (not kept), the untagged
    # reply gives no candidate, the rule is right everywhere -> 1.0, kept
    assert [t.round for t in outcome.trials] == [0, 1, 2, 3]
    assert [t.val_score for t in outcome.trials] == [0.5, 0.5, None, 1.0]
    assert [t.kept for t in outcome.trials] == [True, False, False, True]
    assert "no <INSTRUCTIONS>" in outcome.trials[2].note
    assert outcome.instructions == RULE and outcome.val_score == 1.0
    # the optimiser saw the current instructions and two training mistakes (hallucinated training items), never a
    # validation item
    user = chats[0][1]["content"]
    assert "Judge faithfulness." in user and user.count("<EXAMPLE ") == 2
    assert all(re.search(r"doc i[0-7]\b", c[1]["content"]) and not re.search(r"doc i(8|9|1[01])\b", c[1]["content"])
               for c in chats)
    # one more round after the rule: nothing is judged wrong any more
    outcome, _ = _loop(0, [better], rounds=3)
    assert outcome.trials[-1].note.startswith("no training item judged wrong") and len(outcome.trials) == 3


def test_no_answer_from_the_optimiser_is_not_an_optimisation() -> None:
    outcome, _ = _loop(0, [None, None, None])
    assert outcome.unreached and outcome.instructions == "Judge faithfulness."
    assert outcome.note.startswith("no rewrite beat the starting instructions")
    outcome, _ = _loop(0, [None, f"<INSTRUCTIONS>{RULE}</INSTRUCTIONS>"])
    assert not outcome.unreached and outcome.note == "" and outcome.instructions == RULE


def test_the_loop_is_seeded() -> None:
    shown = {seed: [t.mistakes_shown for t in _loop(seed, [None, None, None])[0].trials] for seed in (0, 0, 1, 2, 3)}
    assert _loop(0, [None] * 3)[0].trials[1].mistakes_shown == shown[0][1]
    assert len({str(v) for v in shown.values()}) > 1  # another seed, other mistakes shown


# --- the verdict stage against the endpoint mock -------------------------------------------------------------
def _answer(body: dict[str, Any]) -> str:
    match = re.search(r"<ANSWER>\n(.*?)\n</ANSWER>", body["messages"][-1]["content"], re.S)
    return match.group(1) if match else ""


def _po_content(arg: str, body: dict[str, Any], j: int) -> str:
    system = body["messages"][0]["content"]
    if system.startswith("You improve the instructions"):
        return f"Here you are. <INSTRUCTIONS>{RULE}</INSTRUCTIONS>"
    wrong = "wrong" in _answer(body)
    verdict = HALLUCINATION if RULE in system and wrong else FAITHFUL
    return f"<THINKING>checked</THINKING><RESPONSE>{verdict}</RESPONSE>"


def _items() -> list[Item]:
    items = []
    for i in range(12):
        inst = Instance(id=f"d/x/{i:02d}", dataset="d", scenario="rag", task_type="rag", context=f"Document {i}.",
                        question=f"Question {i}?")
        text = f"answer {i}" + (" wrong" if i % 2 == 0 else "")
        gen = Generation(id=inst.id, prompt="p", response=text, token_ids=[], token_logprobs=[],
                         finish_reason="provided", n_tokens=0, model="m")
        items.append(Item(instance=inst, prompt=f"prompt {i}", generation=gen))
    return items


SPLIT = {"train": [f"d/x/{i:02d}" for i in range(6)], "val": [f"d/x/{i:02d}" for i in range(6, 9)],
         "test": [f"d/x/{i:02d}" for i in range(9, 12)]}


def _ctx(tmp: Path, srv: FakeOpenAI, labels: dict[str, int], **params: Any) -> CellContext:
    config = RunConfig(detectors=["llm_judge_po"], detector_params={"llm_judge_po": {"shots": 1, "rounds": 2,
                                                                                     **params}},
                       verdict={"model": "judge-x", "base_url": srv.base_url, "retries": 0, "backoff": 0,
                                "timeout": 5})
    ctx = CellContext(config=config, dataset="d", model="m", store=RunStore(tmp).cell("d", "m"),
                      backend_factory=lambda: (_ for _ in ()).throw(AssertionError("no local backend")),
                      detectors=[make_detector("llm_judge_po", config)])
    ctx.split, ctx.labels = SPLIT, labels
    return ctx


def test_optimised_judge_through_the_stage(tmp_path: Path) -> None:
    items = _items()
    labels = {it.id: int(i % 2 == 0) for i, it in enumerate(items)}  # test labels included, as a run passes them
    with FakeOpenAI(content=_po_content, key_of=_answer, default="ok:x") as srv:
        ctx = _ctx(tmp_path / "a", srv, labels)
        stage = VerdictStage(ctx)
        name = stage.asks[-1].name
        assert name.startswith("faithfulness@1shot+po-")  # non-default settings are in the name
        recs = stage.ensure(items)
        po = recs["d/x/10"]["asks"][name]
        assert po["label"] == HALLUCINATION and po["po"]["instructions"] == RULE
        assert po["po"]["val_score"] == 1.0 and po["po"]["trials"][0]["val_score"] == 0.5
        assert po["po"]["optimizer"] == "judge-x" and po["po"]["n_train"] == 6 and po["po"]["n_val"] == 3
        # the optimiser was never shown a test item, and the test items were asked under the final instructions
        optimizer = [b for b in srv.requests if b["messages"][0]["content"].startswith("You improve")]
        assert len(optimizer) == 1
        assert not any(f"answer {i}" in b["messages"][1]["content"] for b in optimizer for i in (9, 10, 11))
        test_asks = [b for b in srv.requests if _answer(b) in ("answer 9", "answer 10 wrong", "answer 11")]
        assert any(b["messages"][0]["content"] == RULE for b in test_asks)
        assert (tmp_path / "a" / "d" / "m" / OPTIMIZED_FILE).exists()
        # a fresh stage (the loader's) finds the records and the outcome without asking anything
        n = len(srv.requests)
        again = VerdictStage(ctx).records(items)
        assert again["d/x/09"]["asks"][name]["po"]["instructions"] == RULE
        VerdictStage(ctx).ensure(items)
        assert len(srv.requests) == n

        # other test labels: the same optimisation (its key and outcome); other training labels: another key
        flipped = {**labels, **{i: 1 - labels[i] for i in SPLIT["test"]}}
        ctx2 = _ctx(tmp_path / "b", srv, flipped)
        stage2 = VerdictStage(ctx2)
        stage2.ensure(items)
        assert stage2._optimization_key(stage2.asks[-1], items) == VerdictStage(ctx)._optimization_key(
            stage2.asks[-1], items)
        trained = {**labels, "d/x/00": 0}
        stage3 = VerdictStage(_ctx(tmp_path / "c", srv, trained))
        assert stage3._optimization_key(stage3.asks[-1], items) != stage2._optimization_key(stage2.asks[-1], items)


def test_an_unreachable_optimiser_is_an_error_naming_it(tmp_path: Path) -> None:
    items = _items()
    labels = {it.id: int(i % 2 == 0) for i, it in enumerate(items)}
    with FakeOpenAI(content=_po_content, key_of=_answer, default="ok:x") as srv:
        srv.plans[""] = ["500"]  # the optimiser's requests carry no <ANSWER>: every one fails
        ctx = _ctx(tmp_path, srv, labels, optimizer_model="rewriter-y", optimizer_base_url=srv.base_url)
        with pytest.raises(HaldetError, match="prompt optimiser rewriter-y gave no answer") as err:
            VerdictStage(ctx).ensure(items)
        assert srv.base_url in str(err.value.where)
        assert not (tmp_path / "d" / "m" / OPTIMIZED_FILE).exists()  # nothing stored: asked again next time
        assert any(b["model"] == "rewriter-y" for b in srv.requests)


def test_optimised_judge_needs_training_and_validation_items(tmp_path: Path) -> None:
    items = _items()
    with FakeOpenAI(content=_po_content, key_of=_answer, default="ok:x") as srv:
        ctx = _ctx(tmp_path, srv, {i: 1 for i in SPLIT["test"]})  # no training labels
        with pytest.raises(HaldetError, match="labelled training and validation items"):
            VerdictStage(ctx).ensure(items)
    with pytest.raises(HaldetError, match="objective"):
        _ = make_detector("llm_judge_po", RunConfig(detector_params={"llm_judge_po": {"objective": "auroc"}})).ask


def test_fs_and_po_judges_in_a_whole_triviaplus_run(tmp_path: Path, cli) -> None:
    """`haldet run --suite triviaplus` with the three judges on the endpoint mock, whose judge is right on every
    answer under the optimiser's rule and says 'faithful' otherwise: the few-shot judge's verdicts reach its scores
    (they once never did), the optimised judge ranks the test answers perfectly, and its final prompt is in the
    manifest, suite_tables.md, tables.md and report.html; the optimiser never saw a test answer. A verdict that failed
    in the first run is asked in the second, and the scores follow (they once kept the first run's NaN)."""
    import json

    from haldet.datasets.base import get_adapter

    fixture = FIXTURES / "datasets" / "triviaplus" / "triviaplus_fixture.parquet"
    items, _ = get_adapter("triviaplus", fixture).load(limit=None)
    truth = {i.response: i.response_label == "hallucination" for i in items}
    test_answers = {i.response for i in items if i.split == "test"}

    def content(arg: str, body: dict[str, Any], j: int) -> str:
        system = body["messages"][0]["content"]
        if system.startswith("You improve the instructions"):
            return f"<INSTRUCTIONS>{RULE}</INSTRUCTIONS>"
        verdict = HALLUCINATION if RULE in system and truth.get(_answer(body)) else FAITHFUL
        return f"<RESPONSE>{verdict}</RESPONSE>"

    failing = sorted(test_answers)[0]  # the first run's judge calls on this test answer all fail
    with FakeOpenAI(content=content, key_of=_answer, default="ok:x") as srv:
        cfg = tmp_path / "cfg.yaml"
        cfg.write_text(json.dumps({
            "detectors": ["llm_judge", "llm_judge_fs", "llm_judge_po"], "evaluation": {"bootstrap": 20},
            "verdict": {"model": "judge-x", "base_url": srv.base_url, "retries": 0, "timeout": 20},
            "detector_params": {"llm_judge_po": {"rounds": 2}},
            "suite_params": {"triviaplus": {"context_tokens": 64}}}))
        out = tmp_path / "run"
        args = ("run", "--suite", "triviaplus", "--dataset", "triviaplus", "--config", str(cfg), "--data-dir",
                str(fixture.parent.parent), "--out", str(out), "--allow-failures")
        srv.plans[failing] = ["500"]
        res = cli(*args)
        assert res.returncode == 0, res.stderr[-3000:]
        first = {r["detector"]: r for r in json.loads((out / "results.json").read_text())
                 if r.get("table") is None and r["metric"] == "auroc"}
        srv.plans.pop(failing)  # the endpoint answers now: the second run asks only what failed, and re-scores
        n = len(srv.requests)
        res = cli(*args)
        assert res.returncode == 0, res.stderr[-3000:]
        assert len(srv.requests) - n == 3  # one verdict per judge for the answer that failed
        optimizer = [b for b in srv.requests if b["messages"][0]["content"].startswith("You improve")]
    n_test = len(test_answers)
    assert all(first[d]["coverage"] == pytest.approx((n_test - 1) / n_test) for d in first)
    rows = [r for r in json.loads((out / "results.json").read_text()) if r.get("table") is None]
    auroc = {r["detector"]: r for r in rows if r["metric"] == "auroc"}
    assert auroc["llm_judge_fs"]["coverage"] == 1.0  # its verdicts are read (all 'faithful': no AUROC to speak of)
    assert auroc["llm_judge_po"]["value"] == 1.0 and auroc["llm_judge_po"]["coverage"] == 1.0
    assert optimizer and not any(a in b["messages"][1]["content"] for b in optimizer for a in test_answers)
    manifest = json.loads((out / "manifest.json").read_text())
    (po,) = [d for c in manifest["cells"] for d in c["detectors"] if d["name"] == "llm_judge_po"]
    assert po["meta"]["optimized_prompt"] == RULE and po["meta"]["prompt_optimization"]["optimizer"] == "judge-x"
    for name in ("suite_tables.md", "tables.md", "report.html"):
        text = (out / name).read_text()
        assert "Optimised judge prompts" in text and RULE in text, name
