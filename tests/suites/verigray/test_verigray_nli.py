"""NLI sentence verifiers: the InFusE-style premise growth on a transparent word-overlap NLI model, the paper's
binary mapping, and a real run through the prompted-entailment backend on the embedded model."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pytest

from haldet.models.pairs.base import PairModel
from haldet.models.pairs.cache import PairCache
from haldet.models.pairs.loader import load_pair_model
from haldet.suites.verigray.nli import verify


class Overlap(PairModel):
    """P(entailment) = 0.9 x share of the hypothesis's words found in the premise; P(contradiction) = 0.05."""

    kind, width, columns = "nli", 3, ("entailment", "neutral", "contradiction")

    def __init__(self) -> None:
        super().__init__("overlap")
        self.calls: list[tuple[str, str]] = []

    def compute(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self.calls += list(pairs)
        out = []
        for premise, hyp in pairs:
            h, p = set(re.findall(r"\w+", hyp.lower())), set(re.findall(r"\w+", premise.lower()))
            e = 0.9 * len(h & p) / len(h)
            out.append([e, 0.95 - e, 0.05])
        return np.array(out)


DOC = "A cat sat. The dog ran. Birds fly south."
HYP = "the cat sat and the dog ran"


def test_infuse_grows_the_premise_while_neutral_falls() -> None:
    model = Overlap()
    probs = verify(model, PairCache(), [DOC], [HYP], variant="infuse")
    # singles: dog 3/6, cat 2/6, birds 0 -> start with "The dog ran.", add "A cat sat." (5/6, neutral falls),
    # adding "Birds fly south." leaves neutral unchanged -> stop; the premise keeps document order
    assert probs[0] == pytest.approx([0.75, 0.2, 0.05])
    assert ("A cat sat. The dog ran.", HYP) in model.calls
    assert ("A cat sat. The dog ran. Birds fly south.", HYP) in model.calls
    assert len(model.calls) == 5  # three singles, two grown premises
    assert verify(model, PairCache(), [DOC], [HYP], variant="document")[0] == pytest.approx([0.75, 0.2, 0.05])


def test_prompted_entailment_on_the_embedded_model() -> None:
    model, meta = load_pair_model("nli", "llm:smollm2-135m", batch_size=4)
    assert meta["used"].startswith("llm-nli:smollm2-135m")  # the id also carries fingerprint and max_length
    probs = verify(model, PairCache(), [DOC, DOC], ["A cat sat.", "Fish can sing opera."])
    assert probs.shape == (2, 3) and np.allclose(probs.sum(axis=1), 1.0) and np.all(probs > 0)
