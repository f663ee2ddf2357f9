"""VeriGray's fine-tuned verifier baselines: the Lynx and ANAH-v2 reply parsers on known replies, and the
MiniCheck-style checker on a tiny randomly initialised 2-way classifier built here (its scores equal the head's
softmax computed directly, max over document chunks), plus the clear error for a checker that cannot be loaded."""

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
    ("hard to say", None)])
def test_anah_reply_parser(reply: str, label: str | None) -> None:
    assert parse_anah(reply)[0] == label


def test_chunks_cut_between_sentences() -> None:
    doc = "One two three. Four five. Six seven eight nine ten eleven. Twelve."
    assert chunks(doc, 5) == ["One two three. Four five.", "Six seven eight nine ten", "eleven. Twelve."]
    assert chunks("short text", 400) == ["short text"]


@pytest.fixture(scope="module")
def tiny_checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from haldet.util.assets import resolve_embedding

    path = tmp_path_factory.mktemp("tiny-minicheck")
    tok = AutoTokenizer.from_pretrained(resolve_embedding("minilm"))
    torch.manual_seed(3)
    BertForSequenceClassification(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=64, num_labels=2)
                                  ).save_pretrained(path)
    tok.save_pretrained(path)
    return path


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
