"""Claim verification against retrieved evidence: the reply a verifier gives, and the rule that decides first.

One procedure for HalluLens's LongWiki judge and the longform suite's verifier labels (HalluLens's LongWiki
verification, Bang et al., 2025): passages are retrieved for each claim (`haldet.models.passages`); a claim whose
normalised text stands inside a retrieved passage is supported by rule (`RULE_QUOTED`, no call); every other claim
is put to an LLM verifier, whose JSON reply `{"supported": bool, "reasoning": str}` (`VerifyReply`, opened with
`PREFILL` on a local model so the decision comes first) is the label. A reply that never parses is a failure,
never a label.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from haldet.judges.text import normalize
from haldet.models.passages import Passage

RULE_QUOTED = "rule:in_passage"
PREFILL = '{"supported": '


class VerifyReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    reasoning: str = ""
    supported: bool


def quoted(claim: str, passages: Sequence[Passage]) -> bool:
    """The rule: the claim's normalised text occurs (as whole words) inside one of the passages."""
    return any(f" {normalize(claim)} " in f" {normalize(p.text)} " for p in passages)
