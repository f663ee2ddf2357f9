"""The zero-shot 7-way classifier's prompt and reply parser (letters, class names, unparsable replies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from haldet.suites.verigray.classifier import OPTIONS, messages, parse_reply
from haldet.suites.verigray.labels import AMBIGUOUS, CONTRADICTING, EXPLICIT, FABRICATED, IMPLICIT, NO_FACT
from haldet.text.templates import template_text


@pytest.mark.parametrize(("reply", "grade"), [
    ("Option: A", EXPLICIT),
    ("The facts are all in paragraph 2.\nOption: B", IMPLICIT),
    ("**Answer:** (C)", CONTRADICTING),
    ("Looking at option C first... it does not hold.\nFinal answer: D", FABRICATED),
    ("F", AMBIGUOUS),
    ("  g.  ", None),  # lower-case letters are words, not options
    ("G. No-Fact: it is a greeting.", NO_FACT),
    ("(D) the stadium size is made up", FABRICATED),
    ("This sentence is Generally Supported by the document.", IMPLICIT),
    ("Not explicitly supported... I would call it inconsistent", CONTRADICTING),
    ("<think>Option: A seems likely</think>\nOption: D", FABRICATED),
    ("I cannot tell.", None),
    ("", None),
])
def test_parser_reads_letters_and_class_names(reply: str, grade: int | None) -> None:
    got, how = parse_reply(reply)
    assert got == grade, how
    if grade is None:
        assert how.startswith("unparsable reply")


def test_letters_cover_the_seven_classes() -> None:
    assert sorted(OPTIONS.values()) == list(range(7))


def test_prompt_shows_document_summary_sentence_and_options(tmp_path: Path) -> None:
    template = template_text("verigray_classify")  # as the verdict prompt reads it
    msg = messages(template, document="DOC TEXT", summary="SUMMARY TEXT", sentence="THE SENTENCE")
    content = msg[0]["content"]
    assert msg[0]["role"] == "user" and "DOC TEXT" in content and "SUMMARY TEXT" in content
    assert content.endswith("THE SENTENCE") and all(f"\n{letter}. " in content for letter in OPTIONS)
    (tmp_path / "verigray_classify.txt").write_text("Judge {{ sentence }} against {{ document }}.")
    custom = template_text("verigray_classify", folder=tmp_path)
    assert messages(custom, document="D", summary="S", sentence="X")[0]["content"] == "Judge X against D."
