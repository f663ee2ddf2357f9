"""parse_confidence: markers first, then the last number; scales mapped to [0, 1]; None when unparseable."""

from __future__ import annotations

import pytest

from haldet.text.confidence import parse_confidence


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Confidence: 0.85", 0.85),
        ("confidence = .7", 0.7),
        ("I am 90% confident.", 0.9),
        ("I'm 85 percent sure", 0.85),
        ("Certainty: 7/10", 0.7),
        ("My confidence score is 8 out of 10.", 0.8),
        ("Score: 75", 0.75),
        ("Score: 75/100", 0.75),
        ("score 7", 0.7),
        ("0.6", 0.6),
        ("1", 1.0),
        ("0", 0.0),
        ("The answer is in 3 parts; I'd say 0.4", 0.4),
        # marker wins over a later number
        ("Confidence: 0.3. Answer: 1889", 0.3),
        # the last isolated number when there is no marker
        ("Paris has 2 names, overall 0.9.", 0.9),
        # clipping
        ("Confidence: 150%", 1.0),
        ("Confidence: -0.2", 0.0),
        ("The year 2023", 1.0),
    ],
)
def test_parse_confidence_values(text: str, expected: float) -> None:
    assert parse_confidence(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "   ", None, "I am not sure at all.", "high", "Confidence: high"])
def test_parse_confidence_unparseable(text: str | None) -> None:
    assert parse_confidence(text) is None


def test_parse_confidence_ignores_numbers_inside_words() -> None:
    # "v2" and "3rd" are not isolated numbers; the only isolated one is 0.5
    assert parse_confidence("model v2, 3rd try: 0.5") == pytest.approx(0.5)
    assert parse_confidence("gpt4 says maybe") is None
