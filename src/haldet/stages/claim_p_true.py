"""The `claim_p_true` stage: the model asked, claim by claim, whether each claim of its answer is true.

P(True) (Kadavath et al., 2022) moved from the answer to its claims (as lm-polygraph's claim-level P(True)): for
every unit of kind `claim`, `sentence` or `clause` of the item (the data's claims, or the claims stage's), the
answered conversation (prompt, answer) is continued by the packaged question `claim_p_true` (Jinja2: `claim`, the
fact's own words `meta.claim` when the unit carries them, else its span of the answer), and P(True) is read from the
first reply position exactly as the `auxiliary` stage reads the answer-level P(True): the mass on the "True"
spellings over the mass on "True" plus "False" spellings. One prompt per claim; a local model reads one forward pass
per prompt, an endpoint needs top log-probs.

Record: {id, key, units: {kind: [{start, end, p_true, logp_true, logp_false}]}, n_calls, n_tokens, source,
seconds}; the signal `CLAIM_P_TRUE` is `units` (per kind, in the order of the instance's units of that kind). The key
covers the model, the prompt, the answer, every claim (offsets and text) and the wording, so new claims are asked
again.
"""

from __future__ import annotations

import math
import time
from typing import Any

import jinja2

from haldet.config import stage_key
from haldet.schema import SpanLabel
from haldet.signals import Signal
from haldet.stages.auxiliary import p_true_from_logprobs, true_false_logprobs
from haldet.stages.base import STAGES, Item, Stage
from haldet.text.templates import override_digest, template_text

TEMPLATE = "claim_p_true"
VERSION = "1"  # bump when the packaged wording or the reading changes
KINDS = ("claim", "sentence", "clause")


def claim_words(unit: SpanLabel) -> str:
    """What a claim says: the fact's own words when the unit carries them, else its span of the answer."""
    return str(unit.meta.get("claim") or unit.text).strip()


def claim_units(item: Item) -> dict[str, list[SpanLabel]]:
    return {kind: units for kind in KINDS if (units := item.instance.units_of(kind))}


@STAGES.register("claim_p_true")
class ClaimPTrueStage(Stage):
    provides = frozenset({Signal.CLAIM_P_TRUE})
    after = ("generate", "sample", "auxiliary")

    def key(self, item: Item) -> str:
        response = item.generation.response if item.generation is not None else item.instance.response
        claims = [(k, u.start, u.end, claim_words(u)) for k, us in claim_units(item).items() for u in us]
        return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt, response, claims, VERSION,
                         *override_digest([TEMPLATE], self.ctx.config.templates))

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        cfg, backend = self.ctx.config.auxiliary, self.ctx.backend
        start = time.perf_counter()
        question = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined).from_string(
            template_text(TEMPLATE, self.ctx.config.templates))
        jobs: list[tuple[int, str, SpanLabel]] = []
        prompts: list[str] = []
        for b, item in enumerate(batch):
            if item.generation is None:
                raise ValueError(f"the claim_p_true stage needs the answer of {item.id}")
            for kind, units in claim_units(item).items():
                for unit in units:
                    jobs.append((b, kind, unit))
                    prompts.append(backend.follow_up(item.prompt, item.generation.response,
                                                     question.render(claim=claim_words(unit)).strip()))
        judged = true_false_logprobs(backend, prompts, max_new_tokens=1, batch_size=cfg.batch_size) if prompts else []
        records: list[dict[str, Any]] = [{"id": item.id, "units": {}, "n_calls": 0, "n_tokens": 0, "source": "prompt"}
                                         for item in batch]
        for (b, kind, unit), (out, true_lps, false_lps) in zip(jobs, judged, strict=True):
            rec = records[b]
            rec["n_calls"] += 1  # one prompt per claim, one reply position read (the cost accounting's units)
            rec["n_tokens"] += 1
            if out.error:  # a remote call that never answered: the record is incomplete, nothing invented
                rec["failed"] = out.error
            p, lt, lf = p_true_from_logprobs(true_lps, false_lps) if not out.error else (None, None, None)
            rec["units"].setdefault(kind, []).append({"start": unit.start, "end": unit.end, "p_true": p,
                                                      "logp_true": _finite(lt), "logp_false": _finite(lf)})
        seconds = (time.perf_counter() - start) / max(1, len(batch))
        for rec in records:
            rec["seconds"] = seconds
        return records


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
