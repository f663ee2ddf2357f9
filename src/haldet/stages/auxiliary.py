"""The `auxiliary` stage: the model's own view of its answer (paper appendix E.1), greedy and cached.

Two follow-up questions per item, each asked as the next user turn of the answered conversation (the item's prompt,
the generated answer as the model's turn, then the question: `Backend.follow_up`):
- verbalized confidence: the model is asked for one number in [0, 1]; the reply up to the end of its first
  sentence that states a number is stored (`verbalized`, `haldet.text.confidence.confidence_statement`: "1. 1" -> "1.")
  and, parsed by `haldet.text.confidence.parse_confidence`, as `verbalized_value` (None when no number is found);
- self-evaluation: the model is asked whether the proposed answer is True or False. P(True) is read from the
  next-token distribution at the first reply position: the probability mass on the first tokens of "True"
  spellings divided by the mass on "True" plus "False" spellings (normalised over the two). The greedy verdict
  text is stored as the fallback (`self_eval_text`).
Only what is read is decoded (`DECODING`, part of the key): P(True) needs one pass over the prompt (a backend with
next-token probabilities returns just the greedy first token, the verdict word, as `self_eval_text`; one without
them returns its whole verdict); a verbalized reply stops as soon as that sentence has ended
(`haldet.text.confidence.confidence_complete`). Only the queries a selected detector reads are asked
(`AuxiliaryStage.queries`). Both prompts share the answered conversation and differ only in the question, so a local
model reads that shared head once per item for both queries (`HFBackend.paired_replies`; the key says so). When
the local lean decoder generates the answers, it asks both questions as branches of each answer's own cache right
where the answer ends (`haldet.backends.hf.answer_reader`), and the generate stage stores these records
(`source: "decoding"`; otherwise `"prompt"`).

Record: {id, key, verbalized, verbalized_value, verbalized_n_tokens, self_eval_text, p_true, logp_true, logp_false,
self_eval_n_tokens, source, seconds} (`*_n_tokens`: the reply's generated tokens, for cost accounting).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from haldet.backends.base import AnswerEvidence, Backend, Capability, EvidenceRequest, FollowUp
from haldet.config import stage_key
from haldet.errors import HaldetError
from haldet.signals import Signal
from haldet.stages.aux_evaluator import EVALUATOR_TEMPLATES, EVALUATOR_VERSION, ask_evaluator, self_eval_fields
from haldet.stages.base import STAGES, DecodingReader, Item
from haldet.stages.generate import GenerateStage
from haldet.text.confidence import confidence_complete, confidence_statement, parse_confidence
from haldet.text.prompts import PromptBuilder
from haldet.text.reasoning import Markers, split_text
from haldet.text.templates import override_digest, packaged_template, template_text

PROMPT_VERSION = "aux-v3"  # bump when the packaged wording changes: it is part of the cache key
# what is decoded of each reply (part of the cache key)
DECODING = "first-token-p-true+verbalized-until-first-stated-number"
SHARED_HEAD = "+shared-head"  # both queries of an item read in one pass over their common head (local backend)

# The questions, asked as the user's next turn after the model's answer (`Backend.follow_up`).
# (packaged templates `verbalized` / `self_eval`; a run config's `templates:` replaces them, and its texts then key
# the records)
VERBALIZED_INSTRUCTION = packaged_template("aux_verbalized.txt").strip()
SELF_EVAL_INSTRUCTION = packaged_template("aux_self_eval.txt").strip()
QUESTION_TEMPLATES = ("verbalized", "self_eval")

TRUE_WORDS = ("True", " True", "true", " true", "TRUE")
FALSE_WORDS = ("False", " False", "false", " false", "FALSE")


def answer_candidates(backend: Backend) -> tuple[list[int], list[int]]:
    """Distinct first-token ids of the True and False spellings in the backend's tokenizer (a spelling whose first
    token is shared by both sides is dropped, so the two masses never overlap)."""
    def first(words: tuple[str, ...]) -> set[int]:
        ids = set()
        for word in words:
            toks = backend.encode_text(word)
            if toks:
                ids.add(int(toks[0]))
        return ids

    true_ids, false_ids = first(TRUE_WORDS), first(FALSE_WORDS)
    shared = true_ids & false_ids
    return sorted(true_ids - shared), sorted(false_ids - shared)


def p_true_from_logprobs(true_lps: list[float], false_lps: list[float]) -> tuple[float | None, float, float]:
    """(P(True) normalised over the two answers, log mass of True, log mass of False)."""
    def logsumexp(xs: list[float]) -> float:
        finite = [x for x in xs if math.isfinite(x)]
        if not finite:
            return float("-inf")
        top = max(finite)
        return top + math.log(sum(math.exp(x - top) for x in finite))

    lt, lf = logsumexp(true_lps), logsumexp(false_lps)
    if not (math.isfinite(lt) or math.isfinite(lf)):
        return None, lt, lf
    top = max(lt, lf)
    p = math.exp(lt - top) / (math.exp(lt - top) + math.exp(lf - top))
    return p, lt, lf


@STAGES.register("auxiliary")
class AuxiliaryStage(DecodingReader):
    provides = frozenset({Signal.VERBALIZED, Signal.SELF_EVAL})
    after = ("generate", "sample")

    def queries(self) -> tuple[bool, bool]:
        """(verbalized, self-evaluation): the configured queries that a selected detector reads."""
        cfg, signals = self.ctx.config.auxiliary, self.ctx.signals
        return (cfg.verbalized and (signals is None or Signal.VERBALIZED in signals),
                cfg.self_eval and (signals is None or Signal.SELF_EVAL in signals))

    def unread_parts(self) -> list[str]:
        cfg = self.ctx.config.auxiliary
        verbalized, self_eval = self.queries()
        return ([name for name, configured, asked in (("verbalized confidence", cfg.verbalized, verbalized),
                                                       ("self-evaluation", cfg.self_eval, self_eval))
                 if configured and not asked])

    def key(self, item: Item) -> str:
        cfg = self.ctx.config.auxiliary
        gen_key = GenerateStage(self.ctx).key(item)
        if self.evaluator():  # the paper's procedure: its own prompts and reply budget (the default keys unchanged)
            return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt, gen_key, EVALUATOR_VERSION,
                             *self.queries(), cfg.evaluator_budget(self.ctx.backend.thinks()),
                             *override_digest(EVALUATOR_TEMPLATES, self.ctx.config.templates))
        return stage_key(self.name, self.ctx.backend.fingerprint(), item.prompt, gen_key, PROMPT_VERSION,
                         *self.queries(), self.reply_budget(), DECODING + (SHARED_HEAD if self.paired() else ""),
                         *override_digest(QUESTION_TEMPLATES, self.ctx.config.templates))

    def reply_budget(self) -> int:
        """The follow-up replies' budget: `auxiliary.max_new_tokens`, else 24, or 4096 when the target thinks (the
        same rule as every role that asks an LLM: `haldet.endpoint_params.reply_budget`)."""
        return self.ctx.config.auxiliary.reply_budget(self.ctx.backend.thinks())

    def check_thinking(self) -> None:
        """Refuse, before any follow-up is asked, a self-evaluation that would read P(True) from a thinking block."""
        cfg, backend = self.ctx.config.auxiliary, self.ctx.backend
        if not self.queries()[1]:
            return
        why = cfg.self_eval_refusal(backend.thinks(), self.ctx.model)
        if why:
            raise HaldetError(why, where="auxiliary.procedure",
                              hint="set `auxiliary.procedure: evaluator` (the decision word after the reasoning), or "
                                   "drop self_eval")

    def until(self) -> Callable[[str], bool]:
        """When a verbalized reply is complete: its first stated number, read in the answer after the thinking block
        on a thinking target (a number inside the reasoning does not stop it)."""
        markers = thinking_markers(self.ctx.backend, self.ctx.config)
        if markers is None:
            return confidence_complete
        return lambda text: _answer_complete(text, markers)

    def evaluator(self) -> bool:
        """Whether the queries are asked as separate evaluator chats (`auxiliary.procedure: evaluator`)."""
        return self.ctx.config.auxiliary.procedure == "evaluator"

    def reads_in_decoding(self) -> bool:
        # an evaluator chat is not a continuation of the answer: it cannot be read while the answer is decoded
        return not self.evaluator()

    def questions(self) -> tuple[str, str]:
        """The verbalized-confidence and self-evaluation questions (the run's templates, else the packaged ones)."""
        templates = self.ctx.config.templates
        return (template_text("verbalized", templates).strip(), template_text("self_eval", templates).strip())

    def paired(self) -> bool:
        """Whether both queries are asked of a backend that reads their shared head once."""
        return all(self.queries()) and self.ctx.backend.shares_heads() and not self.evaluator()

    def items_per_batch(self) -> int:
        # enough replies per stored shard for the decoding pool (decode_rows rows) to be full
        return max(self.ctx.config.auxiliary.batch_size * 2, self.pool_rows())

    def _prompt(self, instruction: str, item: Item) -> str:
        if item.generation is None:
            raise ValueError(f"auxiliary stage needs the generation of {item.id}")
        return self.ctx.backend.follow_up(item.prompt, item.generation.response, instruction)

    def reads(self, request: EvidenceRequest) -> EvidenceRequest:
        """`request` with the queries added as follow-ups of each answer's own cache (`generate_with_evidence`)."""
        backend = self.ctx.backend
        verbalized, self_eval = self.queries()
        verbalized_question, self_eval_question = self.questions()
        follow_ups: dict[str, FollowUp] = {}
        self.check_thinking()
        if verbalized:
            follow_ups["verbalized"] = FollowUp(tail=backend.encode_text(backend.turn_suffix(verbalized_question)),
                                                max_new_tokens=self.reply_budget(), until=self.until())
        if self_eval:
            true_ids, false_ids = answer_candidates(backend)
            follow_ups["self_eval"] = FollowUp(tail=backend.encode_text(backend.turn_suffix(self_eval_question)),
                                               max_new_tokens=1, candidates=true_ids + false_ids)
        return replace(request, follow_ups=follow_ups)

    def from_decoding(self, batch: list[Item], evidence: list[AnswerEvidence],
                      seconds: float) -> list[dict[str, Any]]:
        """Records from the follow-ups' replies read while the answers were decoded (`evidence[i]` of `batch[i]`)."""
        backend = self.ctx.backend
        verbalized, self_eval = self.queries()
        outs = [backend.reply_output(ev.replies["verbalized"], self.until())
                for ev in evidence] if verbalized else []
        verdicts = ([backend.reply_output(ev.replies["self_eval"]) for ev in evidence]
                    if self_eval else [])
        n_true = len(answer_candidates(backend)[0]) if self_eval else 0
        return self._records(batch, outs, _true_false(verdicts, n_true), "decoding", seconds)

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        if self.evaluator():
            return self._evaluate(batch)
        self.check_thinking()
        cfg = self.ctx.config.auxiliary
        budget, until = self.reply_budget(), self.until()
        verbalized, self_eval = self.queries()
        backend = self.ctx.backend
        start = time.perf_counter()
        verbalized_question, self_eval_question = self.questions()
        verbalized_prompts = [self._prompt(verbalized_question, item) for item in batch] if verbalized else []
        self_eval_prompts = [self._prompt(self_eval_question, item) for item in batch] if self_eval else []
        if self.paired():
            true_ids, false_ids = answer_candidates(backend)
            replies, verdicts = backend.paired_replies(
                verbalized_prompts, self_eval_prompts, until, candidates=true_ids + false_ids,
                max_new_tokens=budget, batch_size=cfg.batch_size)
            judged = _true_false(verdicts, len(true_ids))
        else:
            replies = (backend.generate_until(verbalized_prompts, until, max_new_tokens=budget,
                                              batch_size=cfg.batch_size)
                       if verbalized else [])
            judged = self._self_eval(self_eval_prompts) if self_eval else []
        return self._records(batch, replies, judged, "prompt", (time.perf_counter() - start) / max(1, len(batch)))

    def _evaluate(self, batch: list[Item]) -> list[dict[str, Any]]:
        """Records of the evaluator procedure (`haldet.stages.aux_evaluator`): a separate chat per query."""
        cfg, config, backend = self.ctx.config.auxiliary, self.ctx.config, self.ctx.backend
        start = time.perf_counter()
        builder = PromptBuilder(config.prompt, config.templates)
        tasks = [builder.user_message(item.instance) for item in batch]
        answers = []
        for item in batch:
            if item.generation is None:
                raise ValueError(f"auxiliary stage needs the generation of {item.id}")
            answers.append(item.generation.response)
        replies, verdicts = ask_evaluator(backend, tasks, answers, self.queries(), templates=config.templates,
                                          max_new_tokens=cfg.evaluator_budget(backend.thinks()),
                                          batch_size=cfg.batch_size)
        seconds = (time.perf_counter() - start) / max(1, len(batch))
        records: list[dict[str, Any]] = [{"id": item.id, "procedure": "evaluator", "verbalized": None,
                                          "verbalized_value": None, "self_eval_text": None, "p_true": None,
                                          "logp_true": None, "logp_false": None, "decision": None,
                                          "logp_decision": None, "source": "prompt", "seconds": seconds}
                                         for item in batch]
        markers = thinking_markers(backend, config)
        for rec, out in zip(records, replies, strict=False):
            text, no_answer = reply_answer(out, markers)
            _fail_or(rec, out, verbalized=text, verbalized_value=parse_confidence(text),
                     verbalized_n_tokens=out.n_tokens, **_no_answer("verbalized", no_answer))
        for rec, out in zip(records, verdicts, strict=False):
            text, no_answer = reply_answer(out, markers)  # the decision word is read in the answer, after the thinking
            fields = self_eval_fields(backend, out if text == out.text else _answer_only(out, text))
            _fail_or(rec, out, **fields, **_no_answer("self_eval", no_answer))
        return records

    def _records(self, batch: list[Item], replies: list[Any], judged: list[tuple[Any, list[float], list[float]]],
                 source: str, seconds: float) -> list[dict[str, Any]]:
        verbalized, self_eval = self.queries()
        markers = thinking_markers(self.ctx.backend, self.ctx.config)
        records: list[dict[str, Any]] = [{"id": item.id, "verbalized": None, "verbalized_value": None,
                                          "self_eval_text": None, "p_true": None, "logp_true": None,
                                          "logp_false": None, "source": source, "seconds": seconds}
                                         for item in batch]
        if verbalized:
            for rec, out in zip(records, replies, strict=True):
                text, no_answer = reply_answer(out, markers)  # the thinking block split off before parsing
                stated = confidence_statement(text) if no_answer is None else None
                _fail_or(rec, out, verbalized=stated, verbalized_value=parse_confidence(stated),
                         verbalized_n_tokens=out.n_tokens, **_billed("verbalized", out),
                         **_no_answer("verbalized", no_answer))
        if self_eval:
            for rec, (out, true_lps, false_lps) in zip(records, judged, strict=True):
                p, lt, lf = p_true_from_logprobs(true_lps, false_lps)
                _fail_or(rec, out, self_eval_text=out.text, p_true=p, logp_true=_finite(lt), logp_false=_finite(lf),
                         self_eval_n_tokens=out.n_tokens, **_billed("self_eval", out))
        return records

    def _self_eval(self, prompts: list[str]) -> list[tuple[Any, list[float], list[float]]]:
        cfg = self.ctx.config.auxiliary
        return true_false_logprobs(self.ctx.backend, prompts, max_new_tokens=self.reply_budget(),
                                   batch_size=cfg.batch_size)


def true_false_logprobs(backend: Backend, prompts: list[str], *, max_new_tokens: int,
                        batch_size: int) -> list[tuple[Any, list[float], list[float]]]:
    """(greedy reply, log-probs of the True spellings, of the False spellings) per prompt. A local model reads
    them from the next-token distribution by token id; an API model from the returned top alternatives."""
    if Capability.SELF_EVAL_LOGPROBS in backend.capabilities:
        return backend.self_eval_logprobs(prompts, TRUE_WORDS, FALSE_WORDS, max_new_tokens=max_new_tokens,
                                          batch_size=batch_size)
    true_ids, false_ids = answer_candidates(backend)
    outs = backend.candidate_logprobs(prompts, true_ids + false_ids, max_new_tokens=max_new_tokens,
                                      batch_size=batch_size)
    return _true_false(outs, len(true_ids))


def _true_false(outs: list[Any], n_true: int) -> list[tuple[Any, list[float], list[float]]]:
    """(reply, log-probs of the True spellings, of the False spellings) from candidate log-probs (True ids first)."""
    return [(out, out.extra["candidate_logprobs"][:n_true], out.extra["candidate_logprobs"][n_true:]) for out in outs]


def _fail_or(rec: dict[str, Any], out: Any, **values: Any) -> None:
    """Fill a record's part, or mark the record failed when the remote call never answered (nothing invented)."""
    if out.error:
        rec["failed"] = out.error
    else:
        rec.update(values)


def _billed(part: str, out: Any) -> dict[str, Any]:
    """A remote reply's USD as `<part>_cost_usd` (None: price unknown); nothing for a local model."""
    return {f"{part}_cost_usd": out.extra["cost_usd"]} if "cost_usd" in out.extra else {}


def thinking_markers(backend: Backend, config: Any) -> Markers | None:
    """The target's thinking markers when it thinks (a local model's resolved ones, else the `reasoning` section's);
    None for a model that answers directly."""
    if not backend.thinks():
        return None
    own = getattr(backend, "markers", None)
    return own if isinstance(own, Markers) else Markers(config.reasoning.open, config.reasoning.close)


def reply_answer(out: Any, markers: Markers | None) -> tuple[str, str | None]:
    """(the reply's answer text, why it has none): a local thinking model's reply comes split (`extra`), an inline
    thinking block is split here (`haldet.text.reasoning.split_text`); a reply cut off inside its thinking has no
    answer (its reason names the reply budget), never a number parsed from the reasoning."""
    if out.extra.get("no_answer"):
        return "", f"{out.extra['no_answer']} (auxiliary.max_new_tokens / auxiliary.evaluator_max_new_tokens)"
    if markers is None or "reasoning" in out.extra:
        return out.text, None
    cut = split_text(out.text, replace(markers, opens_in_prompt=False), finish_reason=out.finish_reason)
    return cut.answer, (f"{cut.no_answer} (auxiliary.max_new_tokens)" if cut.no_answer else None)


def _answer_only(out: Any, text: str) -> Any:
    """A reply whose thinking was split off here: its answer text, without the token ids and strings that no longer
    line up with it (its decision's log-prob is then unknown, never read from a misaligned token)."""
    return replace(out, text=text, token_ids=[], token_logprobs=[],
                   extra={k: v for k, v in out.extra.items() if k != "tokens"})


def _answer_complete(text: str, markers: Markers) -> bool:
    """`confidence_complete` of the answer after the thinking block (False while the block is still open)."""
    cut = split_text(text, markers)
    return cut.no_answer is None and confidence_complete(cut.answer)


def _no_answer(part: str, reason: str | None) -> dict[str, Any]:
    return {f"{part}_no_answer": reason} if reason else {}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
