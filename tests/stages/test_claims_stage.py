"""The claims stage: an LLM extractor (a local mock endpoint) whose claims are mapped back to answer offsets, with
unmappable claims listed and never kept; the offline sentence / clause units; keyed and resumable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from haldet.config import RunConfig
from haldet.schema import Generation, Instance
from haldet.stages.base import CellContext, Item
from haldet.stages.claims import ClaimsStage, claim_units_of, parse_claims
from haldet.store import RunStore
from haldet.text.claim_spans import clause_spans, map_claim, sentence_spans
from mock_openai import FakeOpenAI, text_content

BIO = ("Ada Lovelace (1815-1852) was an English mathematician. She worked with Charles Babbage on the Analytical "
       "Engine, and she wrote the first published algorithm.")
OTHER = "Alan Turing was a British logician. He was born in London."


def _answer_key(body: dict[str, Any]) -> str:
    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    return user.rsplit("Answer:\n", 1)[1] if "Answer:\n" in user else ""


def _items() -> list[Item]:
    out = []
    for i, text in enumerate([BIO, OTHER]):
        inst = Instance(id=f"d/x/{i}", dataset="d", scenario="long_form", task_type="long_form",
                        question=f"Tell me a bio of person {i}.")
        gen = Generation(id=inst.id, prompt="p", response=text, token_ids=[], token_logprobs=[],
                         finish_reason="stop", n_tokens=0, model="m")
        out.append(Item(instance=inst, prompt=f"prompt {i}", generation=gen))
    return out


def _ctx(tmp: Path, claims: dict[str, Any], templates: dict[str, Any] | None = None) -> CellContext:
    config = RunConfig(claims=claims, templates=templates or {})
    return CellContext(config=config, dataset="d", model="m", store=RunStore(tmp).cell("d", "m"),
                       backend_factory=lambda: (_ for _ in ()).throw(AssertionError("no local backend")))


def test_llm_claims_map_to_answer_offsets_and_an_unmappable_claim_is_listed(tmp_path: Path) -> None:
    planted = "Ada Lovelace won the Nobel Prize in Physics."  # nothing of it is in the answer
    bio_claims = ["Ada Lovelace was an English mathematician.", "Ada Lovelace was born in 1815.",
                  "She worked with Charles Babbage.", planted, "She wrote the first published algorithm."]
    with FakeOpenAI(content=text_content, key_of=_answer_key,
                    default='ok:["Alan Turing was a British logician.", "Alan Turing was born in London."]') as srv:
        srv.plans[BIO] = ["ok:" + json.dumps(bio_claims)]
        ctx = _ctx(tmp_path, {"model": "extractor-x", "base_url": srv.base_url, "retries": 0, "timeout": 5})
        recs = ClaimsStage(ctx).ensure(_items())
        assert len(srv.requests) == 2
        bio = recs["d/x/0"]
        assert bio["unmapped"] == [planted] and bio["judge"] == "extractor-x" and bio["unit"] == "claim"
        assert [c["text"] for c in bio["claims"]] == [c for c in bio_claims if c != planted]
        spans = {c["text"]: BIO[c["start"] : c["end"]] for c in bio["claims"]}
        assert spans["She worked with Charles Babbage."] == "She worked with Charles Babbage"
        assert spans["Ada Lovelace was an English mathematician."] == (
            "Ada Lovelace (1815-1852) was an English mathematician")
        assert spans["Ada Lovelace was born in 1815."] == "Ada Lovelace (1815"
        assert recs["d/x/1"]["unmapped"] == [] and len(recs["d/x/1"]["claims"]) == 2
        # the claims become unlabelled units of kind `claim` of each answer
        inst = claim_units_of(_items(), recs)[0]
        assert inst.response == BIO and [u.kind for u in inst.units] == ["claim"] * 4
        assert all(u.category.value == "invalid" and u.meta["extractor"] == "extractor-x" for u in inst.units)
        # keyed and resumable: a rerun asks nothing; a replaced prompt wording asks again
        ClaimsStage(ctx).ensure(_items())
        assert len(srv.requests) == 2
        reworded = _ctx(tmp_path, {"model": "extractor-x", "base_url": srv.base_url, "retries": 0, "timeout": 5},
                        templates={"claims_extract": "List the facts as a JSON list."})
        ClaimsStage(reworded).ensure(_items())
        assert len(srv.requests) == 4
        assert srv.requests[-1]["messages"][0]["content"].startswith("List the facts as a JSON list.")


def test_a_malformed_or_failed_extraction_keeps_no_record(tmp_path: Path) -> None:
    with FakeOpenAI(content=text_content, key_of=_answer_key, default='ok:["Alan Turing was a British logician."]'
                    ) as srv:
        srv.plans[BIO] = ["ok:I cannot do that."]  # never a JSON list, even after the correction turn
        ctx = _ctx(tmp_path, {"model": "extractor-x", "base_url": srv.base_url, "retries": 0, "timeout": 5})
        stage = ClaimsStage(ctx)
        recs = stage.ensure(_items())
        assert "d/x/0" not in recs and "d/x/1" in recs
        assert ctx.counts.stage("claims").failed == 1
        srv.plans[BIO] = ['ok:["She wrote the first published algorithm."]']
        again = ClaimsStage(ctx).ensure(_items())
        assert [c["text"] for c in again["d/x/0"]["claims"]] == ["She wrote the first published algorithm."]


@pytest.mark.parametrize("kind", ["sentence", "clause"])
def test_offline_units_need_no_model_and_are_not_called_claims(tmp_path: Path, kind: str) -> None:
    recs = ClaimsStage(_ctx(tmp_path, {"extractor": kind})).ensure(_items())
    bio = recs["d/x/0"]
    assert bio["unit"] == kind and bio["judge"] == f"rule:{kind}" and bio["unmapped"] == []
    texts = [BIO[c["start"] : c["end"]] for c in bio["claims"]]
    if kind == "sentence":
        assert texts == ["Ada Lovelace (1815-1852) was an English mathematician.",
                         "She worked with Charles Babbage on the Analytical Engine, and she wrote the first "
                         "published algorithm."]
    else:
        assert texts == ["Ada Lovelace (1815-1852) was an English mathematician.",
                         "She worked with Charles Babbage on the Analytical Engine",
                         "and she wrote the first published algorithm."]
    assert {u.kind for u in claim_units_of(_items(), recs)[0].units} == {kind}


def test_splitters_and_mapping_known_answers() -> None:
    text = "Dr. J. Smith lives in the U.S. now. He was born in 1950! Is he 70? Yes."
    assert [text[a:b] for a, b in sentence_spans(text)] == [
        "Dr. J. Smith lives in the U.S. now.", "He was born in 1950!", "Is he 70?", "Yes."]
    text = "He sang in Paris; she danced in Rome, and they left together. She won, which helped."
    assert [text[a:b] for a, b in clause_spans(text)] == [
        "He sang in Paris", "she danced in Rome", "and they left together.", "She won, which helped."]
    assert map_claim(OTHER, "He was born in Paris.") is None  # only 1 of 2 content words found
    assert map_claim(OTHER, "he was BORN in  London") == (OTHER.index("He was born"), len(OTHER) - 1)
    assert parse_claims('Sure:\n```json\n["a b", " c "]\n```') == ["a b", "c"]
    with pytest.raises(ValueError, match="list of strings"):
        parse_claims('[1, 2]')
