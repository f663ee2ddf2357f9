"""VeriGray's fine-tuned verifier baselines: the Lynx and ANAH-v2 reply parsers on known replies, and the
MiniCheck-style checker on a tiny randomly initialised 2-way classifier built here (its scores equal the head's
softmax computed directly, max over document chunks), plus the clear error for a checker that cannot be loaded;
and the same checker behind the OpenAI endpoint mock: P(Yes) over Yes/No from chosen first-token log-probs, NaN with
the reason without usable log-probs, an error for an unreachable endpoint, the endpoint in the identity, and the
conformance suite on that path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from haldet.errors import HaldetError
from haldet.schema import Category, Generation, Instance, SpanLabel
from haldet.signals import SignalView
from haldet.suites.verigray.minicheck import MiniCheck, chunks
from haldet.suites.verigray.prompted import parse_anah, parse_lynx


@pytest.mark.parametrize(("reply", "label"), [
    ('{"REASONING": ["the date matches"], "SCORE": "FAIL"}', "FAIL"),
    ("```json\n{'REASONING': 'ok', 'SCORE': 'pass'}\n```", "PASS"),
    ("REASONING: fine\nSCORE: Fail", "FAIL"),
    ("It could PASS at first sight, but the verdict is FAIL.", "FAIL"),
    ("<think>PASS</think>I cannot tell.", None),
    ("", None)])
def test_lynx_reply_parser(reply: str, label: str | None) -> None:
    got, why = parse_lynx(reply)
    assert got == label and (why == "") == (label is not None)


@pytest.mark.parametrize(("reply", "label"), [
    ("Facts: 1. born 1950 -> reference says 1950.\n<Hallucination> None", "No Hallucination"),
    ("<No Fact>", "No Fact"),
    ("It is not contradicted, but <Hallucination> Unverifiable", "Unverifiable"),
    ("<hallucination>: contradictory", "Contradictory"),
    ("the second fact contradicts the reference", "Contradictory"),
    ("<No Facts>", "No Fact"), ("<No Reference Information>", "Unverifiable"), ("<Contradictory>", "Contradictory"),
    ("<No Hallucination>", "No Hallucination"), ("<Unverifiable>", "Unverifiable"),
    ("hard to say", None)])
def test_anah_reply_parser(reply: str, label: str | None) -> None:
    assert parse_anah(reply)[0] == label


def test_chunks_cut_between_sentences() -> None:
    doc = "One two three. Four five. Six seven eight nine ten eleven. Twelve."
    assert chunks(doc, 5) == ["One two three. Four five.", "Six seven eight nine ten", "eleven. Twelve."]
    assert chunks("short text", 400) == ["short text"]


@pytest.fixture(scope="module")
def tiny_checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_llama import build_tiny_checker

    return build_tiny_checker(tmp_path_factory.mktemp("tiny-minicheck"), seed=3)


ID = "verigray/test/x"


def _view(document: str, response: str, sentences: list[tuple[int, int]], question: str = "Summarise.") -> SignalView:
    units = [SpanLabel(kind="sentence", start=a, end=b, text=response[a:b], category=Category.CORRECT)
             for a, b in sentences]
    inst = Instance(id=ID, dataset="verigray", scenario="summarization", task_type="summarization",
                    instruction="Summarise the passage.", question=question, context=document, response=response,
                    units=units)
    gen = Generation(id=ID, prompt="", response=response, token_ids=[], token_logprobs=[], finish_reason="stop",
                     n_tokens=0, model="given")
    return SignalView(ids=[ID], instances=[inst], generations=[gen], loader=lambda sig, ids: [response])


def test_minicheck_scores_are_the_heads_support_probability(tiny_checker: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    document = "Ada Lovelace was born in 1815. She wrote about the Analytical Engine. She died in 1852."
    response = "Ada was born in 1815. She built the engine."
    det = MiniCheck(checker=str(tiny_checker), chunk_words=6)
    got = det.score_units(_view(document, response, [(0, 21), (22, 43)]), "sentence")
    tok = AutoTokenizer.from_pretrained(tiny_checker)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_checker).eval()
    pieces = chunks(document, 6)
    assert len(pieces) == 3
    for k, sentence in enumerate(["Ada was born in 1815.", "She built the engine."]):
        enc = tok(pieces, [sentence] * len(pieces), padding=True, return_tensors="pt")
        with torch.inference_mode():
            support = torch.softmax(model(**enc).logits, -1)[:, 1].numpy()
        assert got.values[0][k] == pytest.approx(1 - support.max(), abs=1e-5)
    assert det.meta["checker"]["loaded"] == str(tiny_checker)
    assert det.identity()["models"]["checker"]["requested"] == str(tiny_checker)


def test_minicheck_without_document_is_nan_with_reason(tiny_checker: Path) -> None:
    det = MiniCheck(checker=str(tiny_checker))
    scores = det.score(_view("", "A claim.", [], question=""))
    assert np.isnan(scores.values[0]) and "no source document" in scores.reasons[0]


def test_unloadable_checker_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-checker")
    with pytest.raises(HaldetError, match="no-such-checker"):
        MiniCheck(checker=missing).score(_view("A document.", "A claim.", [(0, 8)]))


# --- the same checker behind an OpenAI-compatible endpoint (the mock) -----------------------------------------------
def _pair_key(body: dict) -> str:
    """The mock's key of a MiniCheck request: "<document chunk>|<claim>" read back from the prompt."""
    import re

    match = re.search(r"\nDocument: (.*)\nClaim: (.*)\nDoes the document", body["messages"][-1]["content"], re.S)
    return f"{match.group(1)}|{match.group(2)}" if match else ""


def _endpoint(srv, **params) -> MiniCheck:
    return MiniCheck(checker="openai:mc", base_url=srv.base_url, retries=0, backoff=0, timeout=5, **params)


DOC = "Ada Lovelace was born in 1815. She wrote about the Analytical Engine. She died in 1852."
RESPONSE = "Ada was born in 1815. She built the engine."


def test_minicheck_endpoint_support_is_p_yes_over_yes_and_no_max_over_chunks(tmp_path: Path) -> None:
    import math

    from mock_openai import FakeOpenAI, text_content

    pieces = chunks(DOC, 6)
    first, second = "Ada was born in 1815.", "She built the engine."
    with FakeOpenAI(content=text_content, key_of=_pair_key, default="ok:Yes") as srv:
        # first sentence: P(Yes) 0.8 / 0.2 / 0.5 over the three chunks -> 0.8 supported
        for piece, p in zip(pieces, (0.8, 0.2, 0.5), strict=True):
            srv.top_first[f"{piece}|{first}"] = {"Yes": math.log(p), "No": math.log(1 - p)}
        # second: unnormalised mass, variants summed (" no", "NO") and other tokens ignored: 0.3 / (0.3 + 0.6)
        for piece in pieces:
            srv.top_first[f"{piece}|{second}"] = {"Yes": math.log(0.3), " no": math.log(0.4), "NO": math.log(0.2),
                                                  "Maybe": math.log(0.1)}
        det = _endpoint(srv, chunk_words=6)
        det.workdir = tmp_path
        got = det.score_units(_view(DOC, RESPONSE, [(0, 21), (22, 43)]), "sentence")
        assert got.values[0] == pytest.approx([1 - 0.8, 1 - 0.3 / 0.9])
        assert len(srv.requests) == 6  # one request per (chunk, sentence)
        body = srv.requests[0]
        assert body["model"] == "mc" and body["logprobs"] is True and body["top_logprobs"] == 5
        assert body["max_tokens"] == 1 and body["temperature"] == 0
        # identity: the endpoint model name and base URL key the scores and are recorded
        ident = det.identity()["models"]["checker"]
        assert ident["requested"] == ident["used"] == "openai:mc" and ident["base_url"] == srv.base_url
        assert ident["fingerprint"] == f"endpoint:{srv.base_url}" and not ident["substitute"]
        assert det.meta["checker"]["used"] == f"endpoint-support-v2:mc@{srv.base_url}"
        assert det.meta["checker_requests"] == 6
        # kept answers are not asked again (pair cache: process memory and <workdir>/pairs/)
        again = _endpoint(srv, chunk_words=6)
        again.workdir = tmp_path
        assert again.score_units(_view(DOC, RESPONSE, [(0, 21), (22, 43)]), "sentence").values[0] == \
            pytest.approx(got.values[0])
        assert len(srv.requests) == 6 and list((tmp_path / "pairs").glob("endpoint-support*.jsonl"))


def test_minicheck_endpoint_without_usable_logprobs_is_nan_with_the_reason() -> None:
    import math

    from mock_openai import FakeOpenAI, text_content

    claim = "Ada was born in 1815."
    with FakeOpenAI(content=text_content, key_of=_pair_key, default="ok:Yes") as srv:
        srv.ignore_logprobs = True  # a server that sends no log-probs
        got = _endpoint(srv).score(_view(DOC, claim, [(0, len(claim))]))
        assert np.isnan(got.values[0])
        assert got.reasons[0].startswith("checker openai:mc: the endpoint returned no log-probs")
        srv.ignore_logprobs = False
        srv.top_first[f"{DOC}|{claim}"] = {"Sure": math.log(0.7), "The": math.log(0.3)}
        got = _endpoint(srv).score(_view(DOC, claim, [(0, len(claim))]))
        assert np.isnan(got.values[0]) and "neither Yes nor No" in got.reasons[0] and "'Sure'" in got.reasons[0]
        # an abstention is never kept: asked again, it now gets its number
        srv.top_first[f"{DOC}|{claim}"] = {"Yes": math.log(0.6), "No": math.log(0.4)}
        assert _endpoint(srv).score(_view(DOC, claim, [(0, len(claim))])).values[0] == pytest.approx(0.4)
        assert len(srv.requests) == 3


def test_minicheck_unreachable_endpoint_is_an_error_naming_it() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    det = MiniCheck(checker="openai:mc", base_url=url, retries=0, timeout=5)
    with pytest.raises(HaldetError, match=r"fact checker mc at .* gave no answer to 1 of 1 requests") as exc:
        det.score(_view(DOC, "A claim.", [(0, 8)]))
    assert url in str(exc.value) and "base_url" in exc.value.hint


def test_minicheck_endpoint_conforms() -> None:
    """The detector conformance suite on the endpoint path, against a mock whose support varies with the pair."""
    import hashlib
    import math

    from haldet.testing.conformance import check_detector
    from mock_openai import FakeOpenAI, text_content

    class Graded(FakeOpenAI):
        def logprobs(self, key: str, content: str) -> list[dict]:
            p = 0.05 + 0.9 * int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) / 0xFFFFFF
            top = {"Yes": math.log(p), "No": math.log(1 - p)}
            return [{"token": "Yes", "logprob": top["Yes"], "bytes": None,
                     "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in top.items()]}]

    with Graded(content=text_content, key_of=_pair_key, default="ok:Yes") as srv:
        problems = check_detector(MiniCheck, {"checker": "openai:mc", "base_url": srv.base_url, "retries": 0})
    assert not problems, problems


def test_minicheck_chunks_each_checkpoint_as_its_package_does() -> None:
    """`chunk_words` / `max_length` `auto`: the 7B checker reads ~32K-token chunks, the classifier heads ~400 words;
    the resolved sizes are the detector's parameters (its identity keys the scores)."""
    from haldet.suites.verigray.minicheck import MiniCheck

    seven_b = MiniCheck(checker="llm:bespokelabs/Bespoke-MiniCheck-7B")
    assert (seven_b.params["chunk_words"], seven_b.params["max_length"]) == (24000, 32768)
    assert seven_b.identity()["params"]["chunk_words"] == 24000
    served = MiniCheck(checker="openai:Bespoke-MiniCheck-7B", base_url="http://127.0.0.1:1/v1")
    assert served.params["chunk_words"] == 24000
    head = MiniCheck(checker="lytang/MiniCheck-RoBERTa-Large")
    assert (head.params["chunk_words"], head.params["max_length"]) == (400, 2048)
    assert MiniCheck(checker="llm:bespokelabs/Bespoke-MiniCheck-7B", chunk_words=6).params["chunk_words"] == 6


def test_minicheck_prompt_override_changes_the_text_sent_and_the_identity(tmp_path: Path) -> None:
    """`prompt` (inline or {path: FILE}) replaces the packaged question of an asked checker: the endpoint gets the
    replaced text, and the detector's identity and the checker's id (the pair cache's key) change with it; the
    default keeps the packaged question and the ids as they were; a template without its two fields, or a prompt
    for a classifier head, is one clear error."""
    from mock_openai import FakeOpenAI, text_content

    claim = "Ada was born in 1815."
    mine = "Source text:\n{premise}\n\nStatement: {hypothesis}\nIs the statement backed by the source? yes/no:"
    file = tmp_path / "check.txt"
    file.write_text(mine + "\n", encoding="utf-8")
    with FakeOpenAI(content=text_content, default="ok:Yes") as srv:
        plain = _endpoint(srv)
        plain.score(_view(DOC, claim, [(0, len(claim))]))
        assert srv.requests[-1]["messages"][-1]["content"].startswith("Decide whether the claim agrees")
        assert plain.meta["checker"]["used"] == f"endpoint-support-v2:mc@{srv.base_url}"  # unchanged by default
        for given in (mine, {"path": str(file)}):
            custom = _endpoint(srv, prompt=given)
            custom.score(_view(DOC, claim, [(0, len(claim))]))
            assert srv.requests[-1]["messages"] == [{"role": "user", "content": mine.format(premise=DOC,
                                                                                              hypothesis=claim)}]
            assert custom.params["prompt"] == mine and custom.identity() != plain.identity()
            assert custom.meta["checker"]["used"].startswith(f"endpoint-support-v2:mc@{srv.base_url}+prompt-")
    # the run config's `templates: {support_check: ...}` reaches the detector as its parameter (which wins)
    from haldet.config import RunConfig
    from haldet.flow.scoring import make_detector

    config = RunConfig(detectors=["minicheck"], templates={"support_check": {"path": str(file)}},
                       detector_params={"minicheck": {"checker": "openai:mc", "base_url": "http://127.0.0.1:1/v1"}})
    assert make_detector("minicheck", config).params["prompt"] == mine
    own = config.model_copy(update={"detector_params": {"minicheck": {
        "checker": "openai:mc", "base_url": "http://127.0.0.1:1/v1", "prompt": "D {premise} C {hypothesis}"}}})
    assert make_detector("minicheck", own).params["prompt"] == "D {premise} C {hypothesis}"
    with pytest.raises(HaldetError, match="fields") as exc:
        MiniCheck(checker="openai:mc", base_url="http://127.0.0.1:1/v1", prompt="Document: {doc}\nClaim: {claim}")
    assert exc.value.where == "detector_params.minicheck.prompt"
    with pytest.raises(HaldetError, match="classifier head"):
        MiniCheck(checker="lytang/MiniCheck-RoBERTa-Large", prompt=mine)


# --- Lynx and ANAH-v2 asked in the structure their models were trained on, through the verdict stage ---------------
ANAH_SENTENCES = ("Hello there!", "She won a prize.", "Ada was born in 1820.")


def _anah_key(body: dict) -> str:
    """The mock's key of an ANAH-v2 turn: "<turn number>|<sentence>"."""
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    sentence = next((s for s in ANAH_SENTENCES if s in users[-1]), "")
    return f"{len(users)}|{sentence}"


def _verdict_records(tmp_path: Path, srv, detector: str) -> dict:
    from haldet.config import RunConfig
    from haldet.flow.scoring import make_detector
    from haldet.stages.base import CellContext, Item
    from haldet.stages.verdict import VerdictStage
    from haldet.store import RunStore

    response = " ".join(ANAH_SENTENCES)
    starts = [response.index(s) for s in ANAH_SENTENCES]
    units = [SpanLabel(kind="sentence", start=a, end=a + len(s), text=s, category=Category.CORRECT)
             for a, s in zip(starts, ANAH_SENTENCES, strict=True)]
    inst = Instance(id=ID, dataset="verigray", scenario="summarization", task_type="summarization",
                    question="Summarise the passage.", context=DOC, response=response, units=units)
    gen = Generation(id=ID, prompt="p", response=response, token_ids=[], token_logprobs=[],
                     finish_reason="provided", n_tokens=0, model="given")
    config = RunConfig(detectors=[detector], verdict={"model": "verifier", "base_url": srv.base_url, "retries": 0,
                                                       "backoff": 0, "timeout": 5})
    ctx = CellContext(config=config, dataset="verigray", model="m", store=RunStore(tmp_path).cell("verigray", "m"),
                      backend_factory=lambda: (_ for _ in ()).throw(AssertionError("no local backend")),
                      detectors=[make_detector(detector, config)])
    return VerdictStage(ctx).ensure([Item(instance=inst, prompt="p", generation=gen)])[ID]["asks"]


def test_anah_v2_is_asked_its_three_turn_dialogue(tmp_path: Path) -> None:
    """Turn 1 (facts?) ends the dialogue on "<No Facts>"; turn 2 (the related information from the document) ends
    it on "<No Reference Information>" (Unverifiable); turn 3 gets turn 2's reply as its reference points and the
    earlier turns as the chat so far, and gives the type. Every reply is recorded, the last one parsed."""
    from mock_openai import FakeOpenAI, text_content

    no_fact, no_ref, typed = ANAH_SENTENCES
    with FakeOpenAI(content=text_content, key_of=_anah_key, default="ok:<Facts Present>") as srv:
        srv.plans[f"1|{no_fact}"] = ["ok:<No Facts>"]
        srv.plans[f"2|{no_ref}"] = ["ok:<No Reference Information>"]
        srv.plans[f"2|{typed}"] = ["ok:Ada Lovelace was born in 1815."]
        srv.plans[f"3|{typed}"] = ["ok:<Contradictory>"]
        units = _verdict_records(tmp_path, srv, "anah_v2")["verigray_anah"]["units"]
        assert [u["label"] for u in units] == ["No Fact", "Unverifiable", "Contradictory"]
        assert [len(u.get("turns", [u["reply"]])) for u in units] == [1, 2, 3]
        assert units[2]["turns"] == ["<Facts Present>", "Ada Lovelace was born in 1815.", "<Contradictory>"]
        assert sorted(srv.calls.values()) == [1, 1, 1, 1, 1, 1]  # 1 + 2 + 3 requests
        last = next(r["messages"] for r in srv.requests if _anah_key(r) == f"3|{typed}")
        assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
        assert "<No Facts>" in last[0]["content"] and DOC in last[2]["content"]
        assert "Ada Lovelace was born in 1815." in last[4]["content"] and "<Unverifiable>" in last[4]["content"]
        assert DOC not in last[0]["content"] and "Summarise the passage." in last[0]["content"]


def test_lynx_is_asked_in_its_trained_layout(tmp_path: Path) -> None:
    """One user turn: the instructions, then QUESTION, DOCUMENT and ANSWER (the sentence) between "--" lines, and
    the JSON reply format with REASONING and SCORE last."""
    from mock_openai import FakeOpenAI, text_content

    reply = '{"REASONING": ["- the date differs"], "SCORE": "FAIL"}'
    with FakeOpenAI(content=text_content, default=f"ok:{reply}") as srv:
        units = _verdict_records(tmp_path, srv, "lynx")["verigray_lynx"]["units"]
        assert [u["label"] for u in units] == ["FAIL"] * 3
        sent = next(r["messages"] for r in srv.requests if ANAH_SENTENCES[2] in r["messages"][-1]["content"])
    assert len(sent) == 1 and sent[0]["role"] == "user"
    text = sent[0]["content"]
    marks = [text.index(m) for m in ("QUESTION", "\n--\nQUESTION", "\n--\nDOCUMENT:\n" + DOC,
                                     "\n--\nANSWER:\n" + ANAH_SENTENCES[2], '"REASONING"', '"SCORE"')]
    assert marks == sorted(marks) and text.rstrip().endswith("}")
