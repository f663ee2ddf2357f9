"""HalluLens: rate formulas on hand-built cases (and the identity C = (1-FR)(1-H)), the robust verdict parser,
the sources in their own schemas, seeded MixedEntities construction, judge rules, detection-set labels."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from haldet.errors import HaldetError
from haldet.suites.hallulens.build import BuildConfig, Item, build_mixed, mixed_medicines, mixed_species
from haldet.suites.hallulens.evaluate import detection_rows, table_markdown
from haldet.suites.hallulens.judges import HalluLensJudges, Judgement
from haldet.suites.hallulens.prompts import Prompts, parse_correctness
from haldet.suites.hallulens.rates import far_rates, longwiki_rates, mean_sd, qa_rates, response_scores
from haldet.suites.hallulens.sources import load_medicines, load_pages, load_taxonomy
from repo_paths import FIXTURES

FIX = FIXTURES / "hallulens"


def qa(abstained: bool, verdict: str | None = None) -> dict:
    return {"id": "x", "abstained": abstained, "verdict": verdict}


# --- rates ------------------------------------------------------------------------------------------------------
def test_qa_rates_hand_computed() -> None:
    # 10 items: 3 refused; of 7 answered, 4 correct, 2 incorrect, 1 unverifiable
    recs = [qa(True)] * 3 + [qa(False, "CORRECT")] * 4 + [qa(False, "INCORRECT")] * 2 + [qa(False, "UNVERIFIABLE")]
    r = qa_rates(recs)
    assert r["false_refusal"] == pytest.approx(3 / 10)
    assert r["hallucination"] == pytest.approx(3 / 7)
    assert r["correct"] == pytest.approx(4 / 10)
    assert (r["n"], r["refused"], r["answered"], r["wrong"], r["unverifiable"]) == (10, 3, 7, 3, 1)


def test_identity_correct_equals_answered_times_not_hallucinated() -> None:
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 40)
        recs = [qa(True) if rng.random() < 0.3 else qa(False, rng.choice(["CORRECT", "INCORRECT", "UNVERIFIABLE"]))
                for _ in range(n)]
        r = qa_rates(recs)
        if r["answered"]:
            assert r["correct"] == pytest.approx((1 - r["false_refusal"]) * (1 - r["hallucination"]))


def test_identity_fails_for_the_public_codes_correct_rate() -> None:
    """Negative control: counting 'not hallucinated' over all items (abstained ones included, as the public code
    does) breaks the identity, so the identity test above can detect that defect."""
    recs = [qa(True, "CORRECT"), qa(False, "CORRECT"), qa(False, "INCORRECT")]
    r = qa_rates(recs)
    public_correct = sum(1 for x in recs if x["verdict"] == "CORRECT") / len(recs)
    assert public_correct != pytest.approx((1 - r["false_refusal"]) * (1 - r["hallucination"]))
    assert r["correct"] == pytest.approx((1 - r["false_refusal"]) * (1 - r["hallucination"]))


def test_hallucination_rate_undefined_when_nothing_answered() -> None:
    r = qa_rates([qa(True), qa(True)])
    assert math.isnan(r["hallucination"]) and "answered" in r["reasons"]["hallucination"]
    assert r["false_refusal"] == 1.0 and r["correct"] == 0.0


def lw(abstained: bool, supported: int = 0, total: int = 0) -> dict:
    claims = [{"supported": i < supported} for i in range(total)]
    return {"id": "x", "abstained": abstained, "sentences": [{"claims": claims}] if not abstained else []}


def test_longwiki_rates_hand_computed() -> None:
    # response A: 8 of 10 supported; B: 40 of 50; C: 0 of 4; D abstained; E answered without claims
    recs = [lw(False, 8, 10), lw(False, 40, 50), lw(False, 0, 4), lw(True), lw(False, 0, 0)]
    r = longwiki_rates(recs, k=32)
    pa, ra = 0.8, 8 / 32
    fa = 2 * pa * ra / (pa + ra)
    pb, rb, fb = 0.8, 1.0, 2 * 0.8 / 1.8
    assert r["precision"] == pytest.approx((pa + pb + 0) / 3)
    assert r["recall_at_k"] == pytest.approx((ra + rb + 0) / 3)
    assert r["f1_at_k"] == pytest.approx((fa + fb + 0) / 3)
    p, rec = r["precision"], r["recall_at_k"]
    assert r["f1_of_means"] == pytest.approx(2 * p * rec / (p + rec))
    assert r["f1_of_means"] != pytest.approx(r["f1_at_k"])  # the two conventions differ here
    assert r["false_refusal"] == pytest.approx(1 / 5)
    assert (r["scored"], r["no_claims"]) == (3, 1)


def test_response_scores() -> None:
    assert response_scores(16, 16, 32) == pytest.approx((1.0, 0.5, 2 / 3))
    assert response_scores(0, 3, 32) == (0.0, 0.0, 0.0)


def test_far_per_domain_mixed_mean_and_headline() -> None:
    domains, recs = {}, []
    plan = {("mixed", "animal"): (1, 4), ("mixed", "plant"): (3, 4), ("mixed", "medicine"): (0, 2),
            ("generated", "business"): (1, 3), ("generated", "product"): (2, 3)}
    k = 0
    for key, (believed, n) in plan.items():
        for i in range(n):
            domains[f"i{k}"] = key
            recs.append({"id": f"i{k}", "believes": i < believed})
            k += 1
    r = far_rates(recs, domains)
    assert r["per_domain"]["mixed/animal"] == 0.25 and r["per_domain"]["mixed/plant"] == 0.75
    assert r["mixed"] == pytest.approx((0.25 + 0.75 + 0.0) / 3)
    assert r["generated"] == pytest.approx(3 / 6)
    assert r["far"] == pytest.approx((r["mixed"] + 0.5) / 2)


def test_mean_sd_over_trials() -> None:
    r = mean_sd([0.2, 0.4, 0.6])
    assert r["mean"] == pytest.approx(0.4) and r["sd"] == pytest.approx(0.2)
    one = mean_sd([0.3])
    assert math.isnan(one["sd"]) and one["sd_reason"]


# --- parser -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "verdict"), [
    ("CORRECT.", "CORRECT"), ("**Incorrect**", "INCORRECT"), ("correct", "CORRECT"), ("Unverifiable!", "UNVERIFIABLE"),
    ('{"reasoning": "same person", "verdict": "correct"}', "CORRECT"),
    ('```json\n{"reasoning": "no", "verdict": "INCORRECT"}\n```', "INCORRECT"),
    ("The answer is INCORRECT", "INCORRECT"),
])
def test_correctness_parser_is_robust(text: str, verdict: str) -> None:
    assert parse_correctness(text).verdict == verdict


@pytest.mark.parametrize("text", ["Yes", "CORRECT or INCORRECT, hard to say", "", '{"verdict": "maybe"}'])
def test_correctness_parser_refuses_to_guess(text: str) -> None:
    with pytest.raises(ValueError):
        parse_correctness(text)


# --- sources and construction --------------------------------------------------------------------------------------
def test_pages_deciles_from_h_score() -> None:
    pages = load_pages(FIX / "pages.jsonl")
    assert len(pages) == 10
    by_title = {p.title: p.decile for p in pages}
    assert by_title["Marie Curie"] == 9 and by_title["Voynich manuscript"] == 0  # highest / lowest centrality


def test_source_errors_name_the_row(tmp_path: Path) -> None:
    bad = tmp_path / "tax.csv"
    bad.write_text("complete_name,kingdom,family\nPanthera,Animalia,Felidae\n")
    with pytest.raises(HaldetError, match="epithet") as exc:
        load_taxonomy(bad)
    assert "row 0" in exc.value.message
    pages = tmp_path / "p.jsonl"
    pages.write_text('{"title": "A", "markdown": "x"}\n')
    with pytest.raises(HaldetError, match="h_score"):
        load_pages(pages)


def test_mixed_entities_are_new_seeded_and_sibling_genera() -> None:
    tax = load_taxonomy(FIX / "taxonomy.csv")
    existing = {s.name for s in tax}
    a = mixed_species(tax, "animal", 5, seed=1)
    assert a == mixed_species(tax, "animal", 5, seed=1)  # seeded
    assert a != mixed_species(tax, "animal", 5, seed=2) or len(a) < 2
    for name, src in a:
        assert name not in existing
        genus = name.split()[0]
        assert genus != src.genus
        assert genus in {s.genus for s in tax if s.family == src.family}
        assert name.split(" ", 1)[1] == src.epithet
    meds = load_medicines(FIX / "medicines.csv")
    made = mixed_medicines(meds, 6, seed=1)
    assert len(made) == 6 and not {m for m, _, _ in made} & set(meds)
    for name, stem, rest in made:
        assert name == f"{stem} {rest}"


def test_build_mixed_prompts_use_describe_templates() -> None:
    tax, meds = load_taxonomy(FIX / "taxonomy.csv"), load_medicines(FIX / "medicines.csv")
    items, report = build_mixed(tax, meds, Prompts(), BuildConfig(mixed_per_domain=2, seed=3))
    assert {it.domain for it in items} == {"animal", "plant", "bacteria", "medicine"}
    assert all(it.name in it.prompt and it.subtask == "mixed" for it in items)
    assert report.kept == len(items) == 8


# --- judges: rules decide, the rest is listed -----------------------------------------------------------------
def test_rule_judges_without_llm_list_the_rest() -> None:
    items = [Item(id="q/1/a", task="precisewikiqa", prompt="Who discovered radium?", answer="Marie Curie"),
             Item(id="q/1/b", task="precisewikiqa", prompt="Who discovered radium?", answer="Marie Curie"),
             Item(id="q/1/c", task="precisewikiqa", prompt="Who discovered radium?", answer="Marie Curie")]
    responses = {"q/1/a": "It was Marie Curie, with Pierre.", "q/1/b": "I don't know.",
                 "q/1/c": "Albert Einstein discovered it."}
    out = HalluLensJudges(None, Prompts()).judge(items, responses)
    assert out.records["q/1/a"]["verdict"] == "CORRECT" and out.records["q/1/a"]["verdict_by"] == "rule:gold_match"
    assert out.records["q/1/b"]["abstained"] is True
    assert "q/1/c" not in out.records  # no rule decides: listed, not labelled
    assert [f["id"] for f in out.failures] == ["q/1/c"] and out.failures[0]["step"] == "abstention"


def test_refusal_rule_for_long_answers_only_takes_an_opening_refusal() -> None:
    items = [Item(id=f"n/1/{k}", task="nonexistent", prompt="Tell me about the animal Felis leo.", name="Felis leo",
                  type="animal", subtask="mixed", domain="animal") for k in "ab"]
    responses = {"n/1/a": "I couldn't find any information on Felis leo. It may be a misspelling.",
                 "n/1/b": "Felis leo is a large cat of the savanna. I cannot confirm its exact range."}
    out = HalluLensJudges(None, Prompts()).judge(items, responses)
    assert out.records["n/1/a"]["believes"] is False and out.records["n/1/a"]["believes_by"] == "rule:refusal"
    assert "n/1/b" not in out.records and [f["id"] for f in out.failures] == ["n/1/b"]  # left to the LLM


def test_detection_labels_refusal_is_correct_for_nonexistent() -> None:
    items = [Item(id="n/1/a", task="nonexistent", prompt="Tell me about Felis leo.", name="Felis leo", type="animal",
                  subtask="mixed", domain="animal"),
             Item(id="n/1/b", task="nonexistent", prompt="Tell me about Lynx tigris.", name="Lynx tigris",
                  type="animal", subtask="mixed", domain="animal")]
    judged = Judgement(records={"n/1/a": {"id": "n/1/a", "believes": True}, "n/1/b": {"id": "n/1/b",
                                                                                    "believes": False}})
    rows = detection_rows("nonexistent", items, {"n/1/a": "A big cat.", "n/1/b": "I cannot find it."}, judged)
    assert {r["id"]: r["label"] for r in rows} == {"n/1/a": "hallucination", "n/1/b": "correct"}


def test_table_is_table2_shaped() -> None:
    stat = {"mean": 0.5, "sd": 0.1}
    results = {"k": 32, "models": {"m": {
        "precisewikiqa": {"summary": {"false_refusal": stat, "hallucination": stat, "correct": stat}},
        "longwiki": {"summary": {m: stat for m in ("false_refusal", "recall_at_k", "precision", "f1_at_k",
                                                    "f1_of_means")}},
        "nonexistent": {"summary": {"far": stat, "mixed": stat, "generated": stat}}}}}
    text = table_markdown(results)
    header = text.splitlines()[0]
    for col in ("PWQA FR", "PWQA H", "PWQA C", "LW FR", "LW R@32", "LW P", "LW F1@32", "FAR"):
        assert col in header
    assert "50.00 ± 10.00" in text and "proxy" not in header


def test_detection_set_adapters_and_suites(tmp_path: Path) -> None:
    import json

    from haldet.datasets.base import get_adapter
    from haldet.schema import Category
    from haldet.suites.base import get_suite

    response = "Curie won the Nobel Prize in 1903. She was born on the Moon."
    rows = [{"id": "longwiki/7/9-0", "task": "longwiki", "prompt": "Describe Marie Curie.", "response": response,
             "label": "hallucination", "units": [
                 {"kind": "claim", "start": 0, "end": 34, "text": "Curie won the Nobel Prize in 1903.",
                  "label": "correct"},
                 {"kind": "claim", "start": 35, "end": 60, "text": "Curie was born on the Moon.",
                  "label": "hallucination"}]},
            {"id": "longwiki/7/9-1", "task": "longwiki", "prompt": "Describe X.", "response": "I don't know.",
             "label": "abstention", "units": []}]
    (tmp_path / "longwiki.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items, report = get_adapter("hallulens_longwiki", data_dir=tmp_path).load()
    assert len(items) == 1 and report.n_filtered == 1  # the abstention is left out by design
    inst = items[0]
    assert inst.response_label == Category.HALLUCINATION
    claims = inst.units_of("claim")
    assert [u.binary for u in claims] == [0, 1]
    # each claim located inside the sentence it came from (verbatim, else by its content words), as FActScore's
    assert [response[u.start:u.end] for u in claims] == ["Curie won the Nobel Prize in 1903", "born on the Moon"]
    assert claims[1].meta["sentence"] == [35, 60] and claims[1].meta["claim"] == "Curie was born on the Moon."
    assert claims[1].meta["labels"] == {"data": "hallucination", "source": "data", "by": None}
    assert get_suite("hallulens_longwiki").levels == ("response", "claim")
    assert set(get_suite("hallulens").datasets) == {"hallulens_precisewikiqa", "hallulens_nonexistent"}


def test_offline_proxy_set_is_seeded_and_labelled_as_a_proxy(tmp_path: Path) -> None:
    from haldet.suites.hallulens.sets import build_sets, read_items

    manifest = build_sets(tmp_path, tasks=["proxy_qa"], cfg=BuildConfig(qa_size=5, seed=1), trials=2,
                          generators=[], prompts=Prompts())
    a, b = read_items(tmp_path / "seed-1" / "proxy_qa.jsonl"), read_items(tmp_path / "seed-2" / "proxy_qa.jsonl")
    assert len(a) == len(b) == 5 and [x.prompt for x in a] != [x.prompt for x in b]
    assert all(x.meta["proxy"] and x.answer and x.task == "proxy_qa" for x in a)
    assert "PROXY" in manifest["reports"]["seed-1/proxy_qa"]["notes"][0]
    stat = {"mean": 0.5, "sd": math.nan}
    results = {"k": 32, "models": {"m": {"proxy_qa": {"summary": {m: stat for m in (
        "false_refusal", "hallucination", "correct")}}}}}
    text = table_markdown(results)
    assert "proxy FR" in text.splitlines()[0] and "PWQA" not in text.splitlines()[0]
    assert "PROXY set (HaluEval-QA questions asked closed-book)" in text


def test_build_with_a_preset_records_it_in_build_json(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from haldet.cli import app
    from haldet.presets import load_preset

    out = tmp_path / "set"
    result = CliRunner().invoke(app, ["hallulens", "build", "--out", str(out), "--task", "proxy_qa", "--qa-size", "3",
                                      "--trials", "1", "--preset", "hallulens"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "build.json").read_text())
    assert manifest["preset"] == load_preset("hallulens").record() and manifest["trials"] == 1  # the flag wins
    assert manifest["config"]["long_size"] == 250  # the preset's value where no flag was given
    other = tmp_path / "plain"
    assert CliRunner().invoke(app, ["hallulens", "build", "--out", str(other), "--task", "proxy_qa", "--qa-size",
                                    "3", "--trials", "1"]).exit_code == 0
    assert json.loads((other / "build.json").read_text())["preset"] is None


def test_cli_errors_are_one_message(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    res = cli("hallulens", "build", "--out", str(tmp_path / "s"), "--task", "precisewikiqa")
    assert res.returncode == 2 and "needs a source file" in res.stderr and "--pages" in res.stderr
    assert "Traceback" not in res.stderr
    res = cli("hallulens", "evaluate", "--set", str(tmp_path), "--out", str(tmp_path / "o"), "--model", "x")
    assert res.returncode == 2 and "no built HalluLens set" in res.stderr and "Traceback" not in res.stderr


def test_a_reply_cut_after_its_decision_keeps_the_decision_and_nothing_is_completed() -> None:
    from haldet.suites.hallulens.prompts import BeliefReply, ClaimsReply, QuestionReply, parse_json

    cut = '{"believes": false, "reasoning": "The chatbot says it cannot find any rec'
    assert parse_json(cut, BeliefReply).believes is False
    rambling = '{"question": "Who discovered radium?", "answer": "Marie Curie", "why": "The passage sa'
    assert parse_json(rambling, QuestionReply).question == "Who discovered radium?"
    with pytest.raises(ValueError):  # cut before the decision: never completed
        parse_json('{"reasoning": "The chatbot", "bel', BeliefReply)
    with pytest.raises(ValueError):  # an unfinished string is never closed: no half question in a test set
        parse_json('{"question": "Who discovered, "radium', QuestionReply)
    with pytest.raises(ValueError):  # an unfinished list is never closed: no claim silently dropped
        parse_json('{"claims": ["A was born in 1900.", "A died in', ClaimsReply)


def test_detectors_run_on_hallulens_detection_sets(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """`haldet run --preset hallulens` (the hallulens suite) on judged answers: teacher-forced through the embedded
    model, one response-level score per answer, one result row per dataset (abstentions left out)."""

    data = tmp_path / "detection"
    data.mkdir()
    rows = {"precisewikiqa": [(f"Who wrote book {i}?", f"Author {i}.", "hallucination" if i % 2 else "correct")
                              for i in range(10)] + [("Who wrote book X?", "I don't know.", "abstention")],
            "nonexistent": [(f"Tell me about the animal Felis {i}.", f"Felis {i} is a cat." if i % 2 else
                             "I cannot find it.", "hallucination" if i % 2 else "correct") for i in range(10)]}
    for task, items in rows.items():
        (data / f"{task}.jsonl").write_text("".join(json.dumps(
            {"id": f"{task}/1/{k}", "task": task, "prompt": p, "response": r, "label": lab}) + "\n"
            for k, (p, r, lab) in enumerate(items)))
    out = tmp_path / "run"
    res = cli("run", "--preset", "hallulens", "--data-dir", str(data), "--out", str(out), "--detector", "perplexity")
    assert res.returncode == 0, res.stderr[-2000:]
    from haldet.presets import load_preset

    manifest = json.loads((out / "manifest.json").read_text())  # the preset runs end to end offline
    assert manifest["preset"] == load_preset("hallulens").record() and manifest["config"]["suite"] == "hallulens"
    assert manifest["config"]["tokens"]["input_format"] == "chat"
    results = json.loads((out / "results.json").read_text())
    auroc = {r["dataset"]: r for r in results if r["metric"] == "auroc" and r["detector"] == "perplexity"}
    assert set(auroc) == {"hallulens_precisewikiqa", "hallulens_nonexistent"}
    assert all(r["level"] == "response" and r["coverage"] == 1.0 for r in auroc.values())
