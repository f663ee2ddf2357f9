"""NumSemSets (Lin, Trivedi & Sun 2023, "Generating with Confidence"): the number of semantic sets among the
samples, the connected components of the graph linking equivalent samples.

Variant "nli" (the paper's): two samples are equivalent when the NLI model finds entailment more likely than
contradiction in both directions. Variant "jaccard" (offline; haldet's lexical stand-in, not in the paper): two
samples are equivalent when the Jaccard similarity of their word sets is at least `jaccard_threshold` (0.5).
Sets are connected components (equivalence is made transitive), as lm-polygraph computes them."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from haldet.detectors._graph import GraphDetector, num_sets
from haldet.detectors.base import register
from haldet.models.pairs.base import CONTRADICTION, ENTAILMENT


@register("num_sem_sets")
class NumSemSets(GraphDetector):
    """U_NumSet = number of connected components of the equivalence graph of the non-empty samples."""
    method_family = "sample consistency"
    paper = "Lin, Trivedi & Sun 2024, Generating with confidence: uncertainty quantification for black-box LLMs"
    peers = ("lm-polygraph", "TruthTorchLM")

    variants: ClassVar[dict[str, str]] = {
        "jaccard": "linked when the word-set Jaccard similarity >= jaccard_threshold (no model; not in the paper)",
        "nli": "linked when P(entailment) > P(contradiction) in both directions (the paper's rule)",
    }
    defaults: ClassVar[dict[str, Any]] = {**GraphDetector.defaults, "jaccard_threshold": 0.5}
    conformance_exemptions: ClassVar[dict[str, str]] = {
        "check_not_constant": "a count of sets takes few values: the suite's random stand-in NLI model may link every "
                              "pair or none, and its synthetic samples fall in one Jaccard set"}

    def statistic(self, relation: np.ndarray) -> float:
        if self.params["variant"] == "jaccard":
            linked = relation >= float(self.params["jaccard_threshold"])
        else:
            forward = relation[..., ENTAILMENT] > relation[..., CONTRADICTION]
            linked = forward & forward.T
        return float(num_sets(linked))
