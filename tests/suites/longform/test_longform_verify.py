"""Claim labels by retrieval + an LLM verifier (HalluLens's LongWiki procedure on any long answer): BM25 by hand,
the verifier through a mock OpenAI endpoint over a small knowledge fixture, the source recorded per claim, failures
never labelled, and the verifier's agreement with the human labels (accuracy, Cohen's kappa)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from haldet.config import JudgeConfig
from haldet.datasets.base import DATASETS
from haldet.models.passages import bm25_scores, passage_index, words
from haldet.suites.longform.agreement import agreement_rows, label_agreement
from haldet.suites.longform.verify_labels import pages_of, verifier_client, verify_claims
from haldet.text.claim_spans import content_words
from repo_paths import FIXTURES


def test_bm25_by_hand() -> None:
    docs = [["a", "b", "b"], ["b", "c"], ["c", "c", "c", "d"]]
    # N = 3, avgdl = 3; idf(b) = log(1 + (3 - 2 + .5) / (2 + .5)) = log(1.6); idf(a) = log(1 + 2.5 / 1.5)
    k1, b = 1.5, 0.75

    def term(tf: float, dl: float, idf: float) -> float:
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / 3))

    expected = [term(1, 3, math.log(1 + 2.5 / 1.5)) + term(2, 3, math.log(1.6)), term(1, 2, math.log(1.6)), 0.0]
    assert bm25_scores(["a", "b"], docs) == pytest.approx(expected)
    assert words("Ada's 1815, London!") == ["ada", "s", "1815", "london"]
    assert len(bm25_scores(["a"], [])) == 0


def _supported_by_words(arg: str, body: dict[str, Any], j: int) -> str:
    """The mock verifier: supported when every content word of the statement is in the passages."""
    prompt = body["messages"][-1]["content"]
    statement = prompt.rsplit("Statement:", 1)[1].split("\n", 1)[0]
    evidence = " ".join(line for line in prompt.splitlines() if line.startswith("Passage "))
    ok = set(content_words(statement)) <= set(content_words(evidence))
    return '{"supported": %s, "reasoning": "word check"}' % ("true" if ok else "false")


def _statement(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"].rsplit("Statement:", 1)[1].split("\n", 1)[0].strip())


def _instances(tmp_path: Path) -> list[Any]:
    shutil.copytree(FIXTURES / "factscore_bio", tmp_path / "factscore_bio")
    instances, _ = DATASETS.get("factscore_bio")(data_dir=tmp_path,
                                                 knowledge=str(FIXTURES / "longform_knowledge.jsonl")).load()
    return instances


def test_verifier_labels_through_a_mock_endpoint(tmp_path: Path) -> None:
    from mock_openai import FakeOpenAI

    instances = _instances(tmp_path)
    assert len(pages_of(instances)) == 6  # one page per person (two answers share Lucia Ferrandi's)
    failing = "Wilk finished 14th."
    with FakeOpenAI(content=_supported_by_words, key_of=_statement, default="ok:x") as srv:
        srv.plans[failing] = ["500"]
        judge = JudgeConfig(model="verifier-x", base_url=srv.base_url, retries=0, timeout=10)
        client = verifier_client(judge, cache=tmp_path / "cache.jsonl")
        index = passage_index("bm25", pages_of(instances), passage_tokens=24, top_k=2)
        out, meta = verify_claims(instances, client=client, verifier_id="openai:verifier-x", index=index)
        asked = len(srv.requests)
        # a rerun reads the verifier's replies from the cache: only the two that failed are asked again
        again, _ = verify_claims(instances, client=verifier_client(judge, cache=tmp_path / "cache.jsonl"),
                                 verifier_id="openai:verifier-x", index=index)
        assert len(srv.requests) == asked + 2
        assert [u.binary for u in again[0].units] == [u.binary for u in out[0].units]
    claims = {(i.meta["topic"], i.meta["source_model"], str(u.meta["claim"])): u for i in out for u in i.units}
    assert meta["claims"] == 67 and meta["asked"] + meta["by_rule"] == 67 and asked == meta["asked"]
    assert meta["retrieval"] == "bm25" and meta["failed"] == 2  # the failing claim in both Tomasz Wilk answers
    peru = claims[("Marta Kessling", "ChatGPT", "She discovered it in Peru.")].meta["labels"]
    assert peru["source"] == "verify:openai:verifier-x" and peru["supported"] is False and peru["data_label"] == 1
    assert peru["evidence"][0]["title"] == "Marta Kessling" and len(peru["evidence"]) == 2
    assert claims[("Oren Dalby", "ChatGPT", "Dalby won a Juno Award.")].binary == 0
    assert claims[("Marta Kessling", "ChatGPT", "Marta Kessling studied at the University of Bonn.")].binary == 1
    failed = claims[("Tomasz Wilk", "ChatGPT", failing)]
    assert failed.binary is None and "500" in failed.meta["labels"]["failed"]  # a failure is never a label
    # a rule decides a claim quoted in a passage, without a call
    rule = [u for u in claims.values() if u.meta["labels"]["source"] == "rule:in_passage"]
    assert len(rule) == meta["by_rule"] and all(u.binary == 0 for u in rule)

    # the verifier's agreement with the human labels: accuracy and Cohen's kappa, recomputed by hand
    pairs = [(u.meta["labels"]["data_label"], u.binary) for u in claims.values()
             if u.binary is not None and "data_label" in u.meta["labels"]]
    n = len(pairs)
    po = sum(a == b for a, b in pairs) / n
    p1, q1 = sum(a for a, _ in pairs) / n, sum(b for _, b in pairs) / n
    pe = p1 * q1 + (1 - p1) * (1 - q1)
    agree = label_agreement(out)
    assert agree["n"] == n == 65 and agree["accuracy"] == pytest.approx(po)
    assert agree["kappa"] == pytest.approx((po - pe) / (1 - pe))
    rows = agreement_rows(out, "(data)")
    assert [r["metric"] for r in rows] == ["agreement", "kappa"]
    assert rows[0]["labeller"] == "rule:in_passage, verify:openai:verifier-x"
    print(f"verifier vs human labels: n={n} accuracy={po:.3f} kappa={agree['kappa']:.3f}")



def test_no_verifier_model_is_a_clear_error() -> None:
    from haldet.errors import HaldetError

    with pytest.raises(HaldetError, match="verifier labels need a verifier model"):
        verifier_client(JudgeConfig(), cache=None)


def test_a_hand_labelled_sample_of_the_models_own_claims(tmp_path: Path) -> None:
    """Claims of an answer the model wrote have no human label; a person's labels of some of them (JSON lines of
    {topic, claim, label S|NS}) become their `data_label`, matched by topic and normalised words, and the agreement
    is computed on those claims only."""
    from haldet.errors import HaldetError
    from haldet.schema import Category, Instance, SpanLabel
    from haldet.suites.longform.agreement import read_hand_labels, with_hand_labels

    answer = "Oren Dalby is a Canadian pianist. He won a Juno Award in 1999. He lives in Paris."
    spans = [(0, 33, Category.CORRECT), (34, 62, Category.CORRECT), (63, len(answer), Category.HALLUCINATION)]
    units = [SpanLabel(start=a, end=b, text=answer[a:b], kind="claim", category=c,
                       meta={"labels": {"source": "verify:openai:v"}}) for a, b, c in spans]
    inst = Instance(id="bio_entities/test/Oren_Dalby", dataset="bio_entities", scenario="longform",
                    task_type="long_form", question="Tell me a bio of Oren Dalby.", response=answer, units=units,
                    meta={"topic": "Oren Dalby"})
    sample = tmp_path / "sample.jsonl"
    sample.write_text('{"topic": "Oren Dalby", "claim": "Oren Dalby is a  canadian pianist", "label": "S"}\n'
                      '{"topic": "Oren Dalby", "claim": "He won a Juno Award in 1999.", "label": "NS"}\n'
                      '{"topic": "Oren Dalby", "claim": "He lives in Paris.", "label": "NS"}\n'
                      '{"topic": "Marta Kessling", "claim": "He lives in Paris.", "label": "S"}\n')
    [out], found = with_hand_labels([inst], read_hand_labels(str(sample)))
    assert found == 3 and [u.meta["labels"]["data_label"] for u in out.units] == [0, 1, 1]
    # verifier (0, 0, 1) vs person (0, 1, 1): accuracy 2/3; kappa (2/3 - 4/9) / (1 - 4/9) = 0.4
    agree = label_agreement([out])
    assert agree["n"] == 3 and agree["accuracy"] == pytest.approx(2 / 3) and agree["kappa"] == pytest.approx(0.4)
    sample.write_text('{"topic": "Oren Dalby", "claim": "x", "label": "maybe"}\n')
    with pytest.raises(HaldetError, match="line 1 of the hand-labelled sample"):
        read_hand_labels(str(sample))
