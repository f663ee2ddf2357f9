"""The signals detectors read and the read-only view detectors get (which stage provides each: the stage classes'
`provides`, planned by `haldet.stages.plan`).

Detectors never call the model: they declare `requires` (a set of `Signal`) and read those signals from a
`SignalView`. The cell flow computes only the stages that the selected detectors' signals need.
A training view carries labels; a scoring view never does, so a detector cannot see test labels.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from haldet.schema import Access, Generation, Instance


class Signal(StrEnum):
    """What `SignalView.get(signal)` returns per item (L = number of layers, hidden_states index 0 is the
    embedding output, so layer axes have L + 1 entries; D = hidden size; K = samples; T = answer tokens):

    RESPONSE         str
    TOKEN_LOGPROBS   float64 [T]
    SAMPLES          list[str] of K answers (an empty string is an empty sample, kept in place)
    SAMPLE_LOGLIKS   float64 [K, 2]: (sum of token log-probs, token count) per sample
    SAMPLE_HIDDEN    float32 [K, D]: pooled state of the configured layer per sample (sample.hidden_layer,
                     default -1 = last; sample.hidden_pooling, default mean over the sample's tokens);
                     a NaN row for an empty sample
    VERBALIZED       str: the verbalized-confidence response
    SELF_EVAL        dict {"p_true": float | None (True mass over True + False), "logp_true": float | None (raw log
                     probability mass of the True answer words), "text": str, "procedure": "follow_up" |
                     "evaluator", "decision": "correct" | "incorrect" | None and "logp_decision": float | None (the
                     evaluator reply's last decision word and the log-prob of its first token)}
    TOKEN_ENTROPIES  float64 [T] entropy (nats) of the model's next-token distribution at each answer token
    The token-level signals below come from the generate stage's one teacher-forced token pass (computed only when
    a selected detector reads one of them; for a provided response it is the pass that scores the response):
    ANSWER_ENTROPIES float64 [T]: the same quantity as TOKEN_ENTROPIES, from that pass
    TOKEN_OFFSETS    int64 [T, 2] character offsets [start, end) of each answer token in the response text
    TOKEN_TOPK_IDS   int64 [T, k]: the observed token at index 0, then the k - 1 most likely other tokens
    TOKEN_TOPK_LOGPROBS float32 [T, k]: their log-probabilities (same order)
    TOKEN_ATTENTION  float32 [T, T]: attention of answer token i to answer token j (j < i), max over layers and
                     heads (`tokens.attention`); row i is 0 for j >= i
    TOKEN_ATTN_LOGDIAG float32 [L, T]: per layer, sum over heads of log A[t, t] (LLM-Check's attention kernel)
    UNIT_HIDDEN_SCORES float32 [L + 1, U + 1]: per hidden-state layer, LLM-Check's hidden score of each unit of
                     `Instance.units` (in order; NaN for a unit without tokens), then of the whole answer (last column)
    HIDDEN_MEAN      float32 [L + 1, D] mean over answer tokens (with features.layers set: [len(layers), D], the
                     hidden-state indices are in the features record's `layers`)
    HIDDEN_LAST      float32 [L + 1, D] last answer token
    HIDDEN_FIRST_N   float32 [L + 1, D] mean over the first N answer tokens (N = `features.select_tokens`; all of
                     them when the answer is shorter)
    HIDDEN_LAST_N    float32 [L + 1, D] mean over the last N answer tokens (same N)
    SEP_FEATURES     float32 [2, L + 1, D]: 0 = token before generation, 1 = second-to-last answer token
    CCS_FEATURES     float32 [2, L + 1, D]: 0 = "the answer is correct" statement, 1 = negated statement
    PRISM_FEATURES   float32 [L + 1, D]: prompt-guided statement, last token
    VERDICT          dict {ask name: verdict-stage record (judge, reply, label, reason)} (haldet.stages.verdict)
    ICR_FEATURES     float32 [L, F]: per-layer ICR features, F = 4 columns (backends.base.ICR_COLUMNS):
                     mean/std/max over answer tokens of the ICR score, mean relative residual-update norm
    TOKEN_CHERNOFF   float64 [T, 5]: per answer token, first log sum_v p_v^g (1/V)^(1 - g) for g in
                     CHERNOFF_EXPONENTS (0.25, 0.5): the log Chernoff coefficient between the model's next-token
                     distribution p over its V outputs and the uniform one u; then KL(q_g || u) for g in
                     KL_EXPONENTS (0.25, 0.5, 1), q_g = p^g / sum p^g (p at temperature 1/g): the Renyi
                     divergence's alpha -> 1 limit (read from the same logits as TOKEN_ENTROPIES; Renyi divergence
                     and Fisher-Rao distance to uniform at any temperature T with g/T in those sets)
    ANSWER_LM_LOGPROBS float64 [T]: log p(y_t | y_<t) of each answer token WITHOUT the prompt (the answer read after
                     the model's start token alone; the `unconditional` stage's one teacher-forced pass)
    TRACE_ANSWER_ENTROPIES float64 [K]: per sample, the mean token entropy (nats) of that sample's answer read after
                     the prompt and the PRIMARY output's reasoning (RACE's alignment; the `trace_answer` stage); NaN
                     for a sample without an answer
    TOKEN_ATTN_PREV  float32 [L, H, T]: per layer and head, in the step that chooses answer token t, the attention of
                     that step's query on the token just before t (its own position: answer token t - 1, or the last
                     prompt token for t = 0), from the generate stage's token pass (RAUQ's a_{t,t-1}), or read while
                     decoding (`stages.tokens.parts_in_decoding`), where column t = 0 is NaN (the prompt's last query
                     is not kept; RAUQ does not read it)
    REDEEP_FEATURES  float32 [L, H + 1]: per layer, ReDeEP's external-context score of each of its H heads, then the
                     parametric-knowledge score of its feed-forward update (haldet.stages.redeep); or, for an item
                     it could not process, the reason (str)
    CLAIM_P_TRUE     dict {unit kind: [{"start", "end", "p_true": float | None, ...}] per unit of that kind of the
                     instance, in order}: the model's P(True) about each claim (haldet.stages.claim_p_true)
    A missing or invalid value for an item is None (detectors then give NaN with a reason).
    """

    RESPONSE = "response"                    # greedy answer text
    TOKEN_LOGPROBS = "token_logprobs"        # log p of each generated token
    SAMPLES = "samples"                      # K stochastic answer texts
    SAMPLE_LOGLIKS = "sample_logliks"        # per-sample (sum log p, n tokens)
    SAMPLE_HIDDEN = "sample_hidden"          # per-sample pooled hidden state of one layer
    VERBALIZED = "verbalized"                # verbalized-confidence response text
    SELF_EVAL = "self_eval"                  # P(True) and verdict text
    TOKEN_ENTROPIES = "token_entropies"      # predictive entropy at each generated token
    HIDDEN_MEAN = "hidden_mean"              # [layers, dim] mean over answer tokens
    HIDDEN_LAST = "hidden_last"              # [layers, dim] last answer token
    HIDDEN_FIRST_N = "hidden_first_n"        # [layers, dim] mean over the first N answer tokens
    HIDDEN_LAST_N = "hidden_last_n"          # [layers, dim] mean over the last N answer tokens
    SEP_FEATURES = "sep_features"            # token-before-generation and second-to-last token states
    CCS_FEATURES = "ccs_features"            # positive / negated statement states
    PRISM_FEATURES = "prism_features"        # prompt-guided statement state
    ICR_FEATURES = "icr_features"            # per-layer residual-update vs attention features
    VERDICT = "verdict"                      # prompted LLM verdicts (LLM-as-a-judge, zero-shot classifiers)
    ANSWER_ENTROPIES = "answer_entropies"    # token entropies from the generate stage's token pass
    TOKEN_OFFSETS = "token_offsets"          # answer token -> character span of the response
    TOKEN_TOPK_IDS = "token_topk_ids"        # observed token first, then the top alternatives
    TOKEN_TOPK_LOGPROBS = "token_topk_logprobs"
    TOKEN_ATTENTION = "token_attention"      # [T, T] answer-to-answer attention, reduced over layers and heads
    TOKEN_ATTN_LOGDIAG = "token_attn_logdiag"  # [L, T] per-layer log attention diagonal (summed over heads)
    UNIT_HIDDEN_SCORES = "unit_hidden_scores"  # [L + 1, U + 1] per-layer hidden-state log-det of each unit
    REDEEP_FEATURES = "redeep_features"      # [L, H + 1] ReDeEP's per-head ECS and per-layer PKS
    TOKEN_CHERNOFF = "token_chernoff"        # [T, 5] log Chernoff coefficients of p_t and uniform, then KLs
    ANSWER_LM_LOGPROBS = "answer_lm_logprobs"  # [T] log p(y_t | y_<t) without the prompt
    TRACE_ANSWER_ENTROPIES = "trace_answer_entropies"  # [K] mean entropy of each sample's answer after the trace
    TOKEN_ATTN_PREV = "token_attn_prev"      # [L, H, T] per-head attention on the previous token
    CLAIM_P_TRUE = "claim_p_true"            # per claim unit: the model's P(True) about the claim


# the exponents g of TOKEN_CHERNOFF's columns, in order: log Chernoff coefficients, then KL(p^g / sum p^g || uniform)
CHERNOFF_EXPONENTS: tuple[float, ...] = (0.25, 0.5)
KL_EXPONENTS: tuple[float, ...] = (0.25, 0.5, 1.0)
CHERNOFF_WIDTH = len(CHERNOFF_EXPONENTS) + len(KL_EXPONENTS)


SIGNAL_ACCESS: dict[Signal, Access] = {
    Signal.RESPONSE: Access.BLACK,
    Signal.SAMPLES: Access.BLACK,
    Signal.VERBALIZED: Access.BLACK,
    Signal.VERDICT: Access.BLACK,
    Signal.TOKEN_LOGPROBS: Access.GRAY,
    Signal.SAMPLE_LOGLIKS: Access.GRAY,
    Signal.SELF_EVAL: Access.GRAY,
    Signal.CLAIM_P_TRUE: Access.GRAY,
    Signal.TOKEN_ENTROPIES: Access.GRAY,
    Signal.ANSWER_ENTROPIES: Access.GRAY,
    Signal.TOKEN_OFFSETS: Access.BLACK,
    Signal.TOKEN_TOPK_IDS: Access.GRAY,
    Signal.TOKEN_TOPK_LOGPROBS: Access.GRAY,
    Signal.TOKEN_CHERNOFF: Access.GRAY,
    Signal.ANSWER_LM_LOGPROBS: Access.GRAY,
    Signal.TRACE_ANSWER_ENTROPIES: Access.GRAY,
}


def access_of(signals: frozenset[Signal]) -> Access:
    """The family a set of signals implies: the most privileged access among them."""
    order = [Access.BLACK, Access.GRAY, Access.WHITE]
    levels = [order.index(SIGNAL_ACCESS.get(s, Access.WHITE)) for s in signals] or [0]
    return order[max(levels)]


SignalLoader = Callable[[Signal, Sequence[str]], list[Any]]

# What a detector reads of a reasoning model's output (`reads`, in its identity): the answer (default), the
# reasoning, or all of it. Views other than the answer are served for these signals; every other signal is
# computed on the answer alone (the passes read the answer after its reasoning), so a detector reading one of them
# reads the answer.
# Two controls of the reasoning-trace study (TRACT, arXiv 2605.08346) read the trace with the final answer out of it
# (`remove`: every occurrence of the answer taken out of the reasoning) or a fixed answer spliced in after it
# (`force`: the reasoning, then `FORCED_ANSWER` instead of the model's answer); both are text views.
READS = ("answer", "reasoning", "all", "remove", "force")
TRACE_READS = ("reasoning", "remove", "force")  # views of the trace: an output without reasoning has none
VIEWED_SIGNALS = frozenset({Signal.RESPONSE, Signal.TOKEN_LOGPROBS, Signal.SAMPLES})
TEXT_SIGNALS = frozenset({Signal.RESPONSE, Signal.SAMPLES})
FORCED_ANSWER = "The answer is 42."  # the fixed answer of the `force` control: the same for every item


def served(reads: str) -> frozenset[Signal]:
    """The signals a view other than the answer serves (every signal for the answer)."""
    return TEXT_SIGNALS if reads in ("remove", "force") else VIEWED_SIGNALS


def without_answer(trace: str, answer: str) -> str:
    """The trace with every occurrence of the answer (case-insensitive, end punctuation ignored) taken out."""
    needle = answer.strip().rstrip(".!?").strip()
    if not needle:
        return trace
    return " ".join(re.sub(re.escape(needle), " ", trace, flags=re.IGNORECASE).split())


def trace_view(reasoning: str | None, answer: str, reads: str) -> str:
    """What a text view shows of one output: its reasoning and answer as `reads` says (`READS`)."""
    trace = reasoning or ""
    if reads == "answer" or (reasoning is None and reads == "all"):
        return answer
    if reads == "reasoning":
        return trace
    if reads == "remove":
        return without_answer(trace, answer)
    return f"{trace}\n\n{FORCED_ANSWER if reads == 'force' else answer}".strip()


class SampleTexts(list[str]):
    """A sample record's K answers (a list of str), with each sample's reasoning (None: the model gave none)."""

    def __init__(self, answers: Sequence[str], reasoning: Sequence[str | None] | None = None) -> None:
        super().__init__(answers)
        self.reasoning: list[str | None] = list(reasoning) if reasoning is not None else [None] * len(answers)

    def view(self, reads: str) -> list[str]:
        return [trace_view(r, a, reads) for a, r in zip(self, self.reasoning, strict=True)]


def generation_view(g: Generation, reads: str) -> tuple[str, list[float] | None]:
    """The text and token log-probs of one output that a detector reading `reads` sees (log-probs None where the
    backend gave none for that part)."""
    if reads == "answer" or (g.reasoning is None and reads == "all"):
        return g.response, list(g.token_logprobs)
    if reads in ("remove", "force"):  # text controls: no token log-probs of their own
        return trace_view(g.reasoning, g.response, reads), None
    if reads == "reasoning":
        span = g.reasoning_span or [0, len(g.reasoning_logprobs)]
        lps = g.reasoning_logprobs[span[0] : span[1]]
        return g.reasoning or "", lps if lps or not g.reasoning else None
    lps_all = [*g.reasoning_logprobs, *g.token_logprobs] if g.reasoning_logprobs or not g.reasoning else None
    return g.output_text(), lps_all


@dataclass
class SignalView:
    """What a detector may see of a set of items: instances, generations and lazily loaded signals.

    `labels` (1 = hallucination, 0 = correct) is set only for training/validation views. A view made with
    `with_labels=False` also shows instances without their unit and response labels (`Instance.without_labels`):
    a detector sees unit offsets and texts, never their labels.
    """

    ids: list[str]
    instances: list[Instance]
    generations: list[Generation]
    loader: SignalLoader
    labels: np.ndarray | None = None
    reads: str = "answer"  # which part of a reasoning model's output the viewed signals show (`READS`)
    _cache: dict[Signal, list[Any]] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    def get(self, signal: Signal) -> list[Any]:
        """Per-item values of a signal, in `ids` order (loaded once per view)."""
        if signal not in self._cache:
            if signal is Signal.RESPONSE:
                self._cache[signal] = [generation_view(g, self.reads)[0] for g in self.generations]
            elif signal is Signal.TOKEN_LOGPROBS:
                lps = [generation_view(g, self.reads)[1] for g in self.generations]
                self._cache[signal] = [None if x is None else np.asarray(x, dtype=np.float64) for x in lps]
            elif signal is Signal.SAMPLES and self.reads != "answer":
                self._cache[signal] = [s.view(self.reads) if isinstance(s, SampleTexts) else s
                                       for s in self.loader(signal, self.ids)]
            else:
                self._cache[signal] = self.loader(signal, self.ids)
        return self._cache[signal]

    def reading(self, reads: str) -> SignalView:
        """The same items seen through another part of their outputs (`READS`)."""
        if reads == self.reads:
            return self
        return SignalView(ids=self.ids, instances=self.instances, generations=self.generations, loader=self.loader,
                          labels=self.labels, reads=reads)

    def subset(self, idx: Sequence[int], *, with_labels: bool) -> SignalView:
        idx = list(idx)
        return SignalView(
            ids=[self.ids[i] for i in idx],
            instances=[self.instances[i] if with_labels else self.instances[i].without_labels() for i in idx],
            generations=[self.generations[i] for i in idx],
            loader=self.loader,
            labels=(self.labels[idx] if with_labels and self.labels is not None else None), reads=self.reads,
        )
