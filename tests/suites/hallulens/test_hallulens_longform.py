"""HalluLens LongWiki answers through the longform flow (`haldet run --dataset hallulens_longwiki --level claim`):
the LongWiki judges (a scripted stand-in LLM, BM25 retrieval over the fixture pages) judge six answers, their
detection rows are the data, and the longform suite locates each claim inside its sentence, relabels claims by
retrieval + a mock verifier endpoint (agreeing with HalluLens's own labels), extracts claims through a mock
extractor (a planted claim listed as unmapped) and scores claims with the embedded model. HalluLens's own
corpus-level rates, its judges' fingerprint and its judge-cache keys are pinned to their values before LongWiki
joined the longform flow."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from haldet.backends.structured import Reply
from haldet.config import JudgeConfig, digest
from haldet.models.passages import passage_index
from haldet.suites.hallulens.build import Item
from haldet.suites.hallulens.evaluate import detection_rows
from haldet.suites.hallulens.judges import HalluLensJudges
from haldet.suites.hallulens.llm import StructuredLLM
from haldet.suites.hallulens.prompts import Prompts
from haldet.suites.hallulens.rates import longwiki_rates
from haldet.suites.hallulens.sources import load_pages
from haldet.text.claim_spans import content_words
from repo_paths import FIXTURES

PAGES = FIXTURES / "hallulens" / "pages.jsonl"
ANSWERS = {  # written against the fixture pages: some sentences the page states, some it does not
    "Marie Curie": "Marie Curie was a Polish and naturalised French physicist and chemist. She was born in Warsaw and "
                   "she won the Nobel Prize in Literature in 1921.",
    "Mount Kilimanjaro": "Mount Kilimanjaro is a dormant volcano in Tanzania. It has three volcanic cones and Kibo "
                         "is the highest of them.",
    "Johannes Gutenberg": "Johannes Gutenberg was a German inventor and craftsman. Around 1440 Gutenberg developed a "
                          "printing system.",
    "Lake Baikal": "Lake Baikal is a rift lake in southern Siberia. It is fed by twelve rivers from Mongolia and its "
                   "only outflow is the Angara River.",
    "Ada Lovelace": "Ada Lovelace was an English mathematician and writer. She was born in Paris on 3 March 1820.",
    "Tardigrade": "I don't know.",  # the refusal rule: an abstention, left out of detection
}


def supported(claim: str, evidence: str) -> bool:
    """The stand-in verifier: every content word of the claim occurs in the passages."""
    return set(content_words(claim)) <= set(content_words(evidence))


def split_claims(sentence: str) -> list[str]:
    """The stand-in extractor: a sentence, split at " and " into two claims (the second a rewrite)."""
    parts = [p.strip().rstrip(".") for p in sentence.split(" and ", 1)]
    return [parts[0]] + [p[0].upper() + p[1:] for p in parts[1:]]


class ScriptedLLM(StructuredLLM):
    """HalluLens's judge, scripted: nobody abstains, claims by `split_claims`, support by `supported`. It records
    the judge-cache key of every request (what `haldet hallulens evaluate` caches replies under)."""

    def __init__(self) -> None:
        super().__init__(JudgeConfig(backend="openai", model="judge-x", base_url="http://127.0.0.1:9/v1",
                                     json_mode=False))
        self.keys: list[str] = []

    def ask(self, requests: Any, progress: Any = None, *, on_done: Any = None) -> list[Any]:
        out = []
        for req in requests:
            self.keys.append(self.request_key(req))
            text = req.messages[-1]["content"]
            if "Decide whether the chatbot declines" in text:
                reply = '{"abstains": false, "reasoning": "It answers."}'
            elif "Break the marked sentence" in text:
                reply = json.dumps({"claims": split_claims(text.split("Sentence:", 1)[1].split("\n")[0].strip())})
            else:
                claim = text.split("Claim:", 1)[1].split("\n")[0].strip()
                evidence = text.split("Passages:", 1)[1].split("Claim:", 1)[0]
                reply = json.dumps({"supported": supported(claim, evidence), "reasoning": "word check"})
            out.append(Reply(req.parse(reply), reply))
        return out


def judged() -> tuple[list[dict[str, Any]], HalluLensJudges, ScriptedLLM, dict[str, Any]]:
    """The detection rows of the six answers, the judges, the scripted LLM and the records."""
    items = [Item(id=f"longwiki/7/{k}", task="longwiki", prompt=f"Tell me about {title}.", title=title)
             for k, title in enumerate(ANSWERS)]
    responses = {it.id: ANSWERS[it.title] for it in items}
    llm = ScriptedLLM()
    judges = HalluLensJudges(llm, Prompts(), passage_index("bm25", load_pages(PAGES), passage_tokens=48, top_k=2))
    judgement = judges.judge(items, responses)
    assert not judgement.failures
    return detection_rows("longwiki", items, responses, judgement), judges, llm, judgement.records


def test_hallulens_rates_and_cache_fingerprints_are_unchanged() -> None:
    """LongWiki's rates, the judges' fingerprint and every judge-cache key equal the values recorded before the
    detection rows gained `title` and `by` (the longform flow reads them; HalluLens's own numbers do not move)."""
    rows, judges, llm, records = judged()
    assert longwiki_rates(records.values(), k=32) == {
        "false_refusal": pytest.approx(1 / 6), "n": 6, "refused": 1, "scored": 5, "no_claims": 0, "k": 32,
        "precision": pytest.approx(0.75), "recall_at_k": pytest.approx(0.075),
        "f1_at_k": pytest.approx(0.1361904761904762), "f1_of_means": pytest.approx(0.13636363636363635), "reasons": {}}
    # recorded on the commit before this change (the judges, their prompts and the client untouched since)
    assert digest(judges.fingerprint()) == "943f9359ce5429c2"
    assert len(llm.keys) == 23 and digest(llm.keys) == "80967ba97d6f45bd"
    # the rows the longform flow reads: the page title, and who decided each claim
    assert [r["title"] for r in rows] == list(ANSWERS)  # the abstention too (labelled abstention)
    assert {u["by"] for r in rows for u in r["units"]} == {"rule:in_passage", "openai:judge-x"}


def test_longwiki_rows_load_as_located_claims_with_their_label_source(tmp_path: Path) -> None:
    from haldet.datasets.base import get_adapter

    rows, *_ = judged()
    (tmp_path / "longwiki.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items, report = get_adapter("hallulens_longwiki", data_dir=tmp_path, params={"knowledge": str(PAGES)}).load()
    assert len(items) == 5 and report.n_filtered == 1  # the abstention
    curie = next(i for i in items if i.id.endswith("longwiki:7:0"))
    assert curie.meta["topic"] == "Marie Curie" and curie.references[0].startswith("Marie Curie was a Polish")
    spans = [(curie.response[u.start:u.end], u.meta["claim"], u.meta["labels"]["by"]) for u in curie.units]
    assert spans == [  # each claim inside its own sentence, at the words it states
        ("Marie Curie was a Polish", "Marie Curie was a Polish", "rule:in_passage"),
        ("naturalised French physicist and chemist", "Naturalised French physicist and chemist", "rule:in_passage"),
        ("She was born in Warsaw", "She was born in Warsaw", "openai:judge-x"),
        ("she won the Nobel Prize in Literature in 1921", "She won the Nobel Prize in Literature in 1921",
         "openai:judge-x")]
    assert [u.binary for u in curie.units] == [0, 0, 0, 1] and curie.meta["sentence_spans"] == 0
    assert all(u.meta["labels"]["source"] == "data" for i in items for u in i.units)
    assert "labels" not in curie.without_labels().units[0].meta  # the label source is hidden from detectors


def _endpoint(planted: str) -> Any:
    """The mock endpoint: the extractor (`split_claims` of each sentence, plus `planted` for Marie Curie's answer)
    and the verifier (`supported` against the passages in the prompt)."""
    def reply(arg: str, body: dict[str, Any], j: int) -> str:
        prompt = body["messages"][-1]["content"]
        if "Statement:" in prompt:
            statement = prompt.rsplit("Statement:", 1)[1].split("\n", 1)[0]
            evidence = prompt.split("Passage 1 (", 1)[1].rsplit("Statement:", 1)[0]  # passages span lines
            return json.dumps({"supported": supported(statement, evidence), "reasoning": "word check"})
        answer = prompt.rsplit("Answer:\n", 1)[1]
        claims = [c for sent in re.split(r"(?<=\.) (?=[A-Z])", answer) for c in split_claims(sent)]
        return json.dumps(claims + ([planted] if answer.startswith("Marie Curie") else []))
    return reply


def _rows(out: Path, name: str) -> list[dict[str, Any]]:
    if name == "results.json":
        results = json.loads((out / name).read_text())
        return results if isinstance(results, list) else results["rows"]
    return list(csv.DictReader((out / name).open()))


@pytest.mark.slow
def test_longwiki_answers_through_the_longform_flow(tmp_path: Path) -> None:
    """`haldet run --dataset hallulens_longwiki --level claim,response` picks the longform suite: claims relabelled
    by retrieval + the mock verifier (the same rule, retrieval and claims as HalluLens's judge: full agreement with
    its labels), claim-level AUROC recomputed from unit_scores.csv, response rows from the claims; then, on the same
    run, claims extracted by the mock extractor (a planted claim listed as unmapped) and verified."""
    from conftest import run_cli
    from mock_openai import FakeOpenAI

    rows, *_ = judged()
    data = tmp_path / "detection"
    data.mkdir()
    (data / "longwiki.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    planted = "Marie Curie discovered penicillin in Glasgow."
    out, config = tmp_path / "run", tmp_path / "run.yaml"
    with FakeOpenAI(content=_endpoint(planted), default="ok:x") as srv:
        endpoint = {"base_url": srv.base_url, "retries": 0, "timeout": 10}
        settings = {"dataset_params": {"hallulens_longwiki": {"knowledge": str(PAGES)}},
                    "judge": {"model": "verifier-x", **endpoint}, "claims": {"model": "extractor-x", **endpoint},
                    "suite_params": {"longform": {"labels": "verify", "retrieval": "bm25", "passage_tokens": 48,
                                                  "verify_passages": 2}}}
        config.write_text(json.dumps(settings))
        args = ["run", "--dataset", "hallulens_longwiki", "--data-dir", str(data), "--detector", "likelihood",
                "--level", "claim,response", "--min-per-class", "0", "--allow-failures", "--config", str(config),
                "--out", str(out)]
        proc = run_cli(*args)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads((out / "manifest.json").read_text())["config"]["suite"] == "longform"
        results = _rows(out, "results.json")
        agree = {r["metric"]: r for r in results if r.get("table") == "claim labels"}
        # the longform verifier on HalluLens's claims, with HalluLens's rule, retrieval and (mock) verifier reply
        assert agree["agreement"]["n"] == 16 and agree["agreement"]["value"] == 1.0 and agree["kappa"]["value"] == 1.0
        claims = [r for r in _rows(out, "unit_scores.csv") if r["level"] == "claim" and r["part"] == "test"]
        assert len(claims) == 16 and {r["item_id"].rsplit("/", 1)[1] for r in claims} == {
            f"longwiki:7:{k}" for k in range(5)}
        y, s = [int(float(r["label"])) for r in claims], [float(r["score"]) for r in claims]
        reported = next(r for r in results if r["level"] == "claim" and r["metric"] == "auroc" and not r.get("table"))
        assert sum(y) == 4 and reported["value"] == pytest.approx(roc_auc_score(y, s), abs=1e-9)
        worst: dict[str, float] = {}
        for r in claims:
            worst[r["item_id"]] = max(worst.get(r["item_id"], -np.inf), float(r["score"]))
        bad = sorted({r["item_id"] for r in claims if r["label"] in ("1", "1.0")})
        ids = sorted(worst)
        row = next(r for r in results if r.get("table") == "response from claims" and r["aggregate"] == "worst_claim"
                   and r["metric"] == "auroc")
        assert row["value"] == pytest.approx(roc_auc_score([int(i in bad) for i in ids], [worst[i] for i in ids]))

        settings["suite_params"]["longform"]["claims"] = "extract"  # the same answers, claims extracted
        config.write_text(json.dumps(settings))
        proc = run_cli(*args, "--update")
        assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(x) for x in (out / "hallulens_longwiki" / "smollm2-135m" / "claims.jsonl").read_text()
            .splitlines()]
    assert [r["unmapped"] for r in recs if r["id"].endswith("longwiki:7:0")] == [[planted]]
    counts = {r["metric"]: r["value"] for r in _rows(out, "results.json") if r.get("table") == "extraction"}
    assert counts["answers"] == 5 and counts["claims_unmapped"] == 1 and counts["claims_kept"] == 16
    claims = [r for r in _rows(out, "unit_scores.csv") if r["level"] == "claim"]
    assert len(claims) == 16 and all(r["label"] != "" for r in claims)  # every extracted claim verified
    results = _rows(out, "results.json")
    y, s = [int(float(r["label"])) for r in claims], [float(r["score"]) for r in claims]
    reported = next(r for r in results if r["level"] == "claim" and r["metric"] == "auroc" and not r.get("table"))
    assert 0 < sum(y) < 16 and reported["value"] == pytest.approx(roc_auc_score(y, s), abs=1e-9)
    assert {r["aggregate"] for r in results if r.get("table") == "response from claims"} == {"worst_claim",
                                                                                             "claim_share"}
