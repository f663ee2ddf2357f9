"""The evaluator procedure of the `auxiliary` stage (`auxiliary.procedure: evaluator`; OpenHalDet appendix E.1-E.3).

The default procedure asks its questions as the next user turn of the answered chat and reads P(True) at the first
reply position. The paper does it another way, and this module does it that way:
- each query is a *separate* chat: an evaluator system turn, then one user turn holding the task as the target model
  saw it (`PromptBuilder.user_message`: the clean task prompt from the unified schema), the proposed answer and the
  ask (packaged templates `evaluator_{verbalized,self_eval}_{system,user}`, haldet's own wording of the paper's
  structure);
- the model answers greedily, up to `auxiliary.evaluator_max_new_tokens` tokens, so it may reason before its verdict;
- verbalized confidence: the whole reply is stored and parsed (`parse_confidence`: a number next to an explicit
  indicator, else the last isolated number; percentages and 1-10 / 1-100 scales);
- self-evaluation: the decision is the reply's last "Correct" / "Incorrect" (the system turn asks for it at the very
  end); its log-probability is the generated log-prob of the token where that word starts (where the model chose
  between the two), stored as `logp_decision` beside the decision itself. The `self_eval` detector's `decision`
  variants turn it into P(True) (docs/detectors.md); without log-probs the decision text is the fallback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jinja2

from haldet.backends.base import Backend, GenOutput
from haldet.text.templates import template_text

EVALUATOR_VERSION = "evaluator-v1"  # bump when the packaged evaluator wording changes (part of the cache key)
EVALUATOR_TEMPLATES = ("evaluator_verbalized_system", "evaluator_verbalized_user",
                       "evaluator_self_eval_system", "evaluator_self_eval_user")

_DECISION = re.compile(r"\b(incorrect|correct)\b", re.IGNORECASE)


def evaluator_chat(query: str, task: str, answer: str, templates: dict[str, Any] | None) -> list[dict[str, str]]:
    """The evaluator chat of `query` ("verbalized" or "self_eval"): its system turn, then the task and answer."""
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
    system = template_text(f"evaluator_{query}_system", templates).strip()
    user = env.from_string(template_text(f"evaluator_{query}_user", templates)).render(question=task, answer=answer)
    return [{"role": "system", "content": system}, {"role": "user", "content": user.strip()}]


def find_decision(text: str | None) -> tuple[str, int] | None:
    """("correct" | "incorrect", character offset) of the reply's last decision word, or None without one."""
    found = list(_DECISION.finditer(text or ""))
    if not found:
        return None
    last = found[-1]
    return last.group(1).lower(), last.start()


def token_spans(backend: Backend, out: GenOutput) -> list[tuple[int, int]] | None:
    """Character spans of a reply's generated tokens in its text: from the ids (a local model) or from the token
    strings an endpoint returned; None when neither is there."""
    if out.token_ids:
        return backend.token_offsets(out.token_ids, out.text)
    strings = out.extra.get("tokens")
    if not strings:
        return None
    joined = "".join(strings)
    lead = len(joined) - len(joined.lstrip()) if joined != out.text else 0  # a text stripped of its lead
    spans, pos = [], 0
    for s in strings:
        spans.append((max(0, pos - lead), max(0, pos + len(s) - lead)))
        pos += len(s)
    return spans


def decision_logprob(backend: Backend, out: GenOutput, offset: int) -> float | None:
    """The generated log-prob of the token in which the decision word starting at `offset` begins (None when the
    reply came without log-probs or no token covers the offset)."""
    spans = token_spans(backend, out)
    if not spans or len(out.token_logprobs) != len(spans):
        return None
    for (a, b), lp in zip(spans, out.token_logprobs, strict=True):
        if a <= offset < b:
            return float(lp)
    return None


def evaluator_replies(backend: Backend, chats: Sequence[list[dict[str, str]]], *, max_new_tokens: int,
                      batch_size: int) -> list[GenOutput]:
    """Greedy replies to evaluator chats (rendered with the backend's own chat template)."""
    return backend.generate([backend.render_chat(list(c)) for c in chats], max_new_tokens=max_new_tokens,
                            batch_size=batch_size)


def self_eval_fields(backend: Backend, out: GenOutput) -> dict[str, Any]:
    """A self-evaluation record's fields from one evaluator reply (the whole reply is the stored text)."""
    found = find_decision(out.text)
    decision, logp = (None, None) if found is None else (found[0], decision_logprob(backend, out, found[1]))
    return {"self_eval_text": out.text, "decision": decision, "logp_decision": logp,
            "self_eval_n_tokens": out.n_tokens}


def ask_evaluator(backend: Backend, tasks: list[str], answers: list[str], queries: tuple[bool, bool], *,
                  templates: dict[str, Any] | None, max_new_tokens: int,
                  batch_size: int) -> tuple[list[GenOutput], list[GenOutput]]:
    """(verbalized replies, self-evaluation replies) of the asked queries (an empty list for one not asked)."""
    verbalized, self_eval = queries
    out: list[list[GenOutput]] = []
    for query, asked in (("verbalized", verbalized), ("self_eval", self_eval)):
        chats = [evaluator_chat(query, t, a, templates) for t, a in zip(tasks, answers, strict=True)] if asked else []
        out.append(evaluator_replies(backend, chats, max_new_tokens=max_new_tokens, batch_size=batch_size)
                   if chats else [])
    return out[0], out[1]
