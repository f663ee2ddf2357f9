"""The backend protocol: what stages may ask of a model.

Every method a backend cannot serve raises `SignalUnavailableError` naming the backend and what was asked, so
a detector needing hidden states from an API model fails with one clear message before any work is done. What a
backend can serve is declared, not probed: `Backend.capabilities` (a set of `Capability`), read by
`haldet.backends.select.check_signals` once before a run and by the stages that choose between two ways of
asking for the same evidence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from haldet.errors import SignalUnavailableError


@dataclass
class GenOutput:
    """One generated answer: text, the generated token ids (no prompt, no EOS/padding), their log-probs."""

    text: str
    token_ids: list[int]
    token_logprobs: list[float]
    finish_reason: str  # "stop" (EOS or stop string) or "length" ("error" when `error` is set)
    extra: dict[str, Any] = field(default_factory=dict)
    error: str = ""  # set by remote backends when every attempt failed: no answer exists, nothing is stored

    @property
    def n_tokens(self) -> int | None:
        """Generated tokens: the ids, or what a remote backend reported (None when it did not say)."""
        if self.token_ids or "n_tokens" not in self.extra:
            return len(self.token_ids)
        n = self.extra["n_tokens"]
        return None if n is None else int(n)


@dataclass
class ForwardRequest:
    """One teacher-forced sequence: `ids` (prompt + answer token ids, exactly as generated) and the answer span
    `[start, len(ids))` (empty when `start == len(ids)`: then only the branches are read).

    `branches` are continuations of `ids` (name -> suffix ids, pooled over their own tokens): each continues right
    after `ids` and sees `ids` and itself but not the other branches. They share the pass over `ids` (one packed
    row with a tree-shaped attention mask), so a statement or a sample costs only its own tokens."""

    ids: list[int]
    start: int
    key: str = ""  # caller's tag (e.g. item id + group), echoed back
    branches: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class ForwardOutput:
    """What one teacher-forced pass gives for one request (arrays are numpy, float32 unless noted).

    token_logprobs/token_entropies: [T] over the answer span (log p of each answer token given everything before it,
    entropy of the model's distribution at that position); pooled: pooling name -> [n_layers, D] for the requested
    layers (hidden_states index 0 = embedding output); icr: [L, F] (see `ICR_COLUMNS`) or None;
    branch_states: branch name -> [n_layers, D] pooled over its tokens (`branch_pooling`); window: how a sequence
    longer than the model window was handled (None when it fit). With an empty answer span only `branch_states`
    is filled.
    """

    key: str
    n_tokens: int
    token_logprobs: np.ndarray | None = None
    token_entropies: np.ndarray | None = None
    token_chernoff: np.ndarray | None = None  # [T, 5] (`Signal.TOKEN_CHERNOFF`), beside the entropies
    pooled: dict[str, np.ndarray] = field(default_factory=dict)
    icr: np.ndarray | None = None
    branch_states: dict[str, np.ndarray] = field(default_factory=dict)
    window: dict[str, Any] | None = None
    # read while decoding when `EvidenceRequest.top_k` / `prev_attention` ask (as `TokenOutput`'s fields)
    topk_ids: np.ndarray | None = None
    topk_logprobs: np.ndarray | None = None
    attn_prev: np.ndarray | None = None


@dataclass
class TokenRequest:
    """One teacher-forced token pass: `prompt_ids` then `answer_ids` (exactly the answer's tokens); `key` is echoed.
    `spans`: answer-token ranges [a, b) (the item's units) whose per-layer hidden scores the `layers` part wants."""

    prompt_ids: list[int]
    answer_ids: list[int]
    key: str = ""
    spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class TokenOutput:
    """Token-level evidence of one answer from one pass (T = answer tokens). `token_logprobs` [T] always; the rest
    only when asked: `entropies` [T] (nats), `topk_ids`/`topk_logprobs` [T, k] with the observed token at index 0,
    `attention` [T, T] (answer token i to answer token j < i, max over layers and heads), and the LLM-Check
    evidence (`layers`): `attn_logdiag` [L, T] (per layer, sum over heads of log A[t, t]) and `span_hidden`
    [L + 1, len(spans)] (per hidden-state layer, `haldet.backends.hf.llmcheck.hidden_score` of each span).
    `window` says how a sequence longer than the model window was handled; when the answer alone does not fit,
    every field but `window` is None (its `reason` says why)."""

    key: str
    token_logprobs: np.ndarray | None = None
    entropies: np.ndarray | None = None
    topk_ids: np.ndarray | None = None
    topk_logprobs: np.ndarray | None = None
    attention: np.ndarray | None = None
    attn_logdiag: np.ndarray | None = None
    span_hidden: np.ndarray | None = None
    attn_prev: np.ndarray | None = None  # `prev_attention`: [L, H, T] (`Signal.TOKEN_ATTN_PREV`)
    window: dict[str, Any] | None = None


@dataclass
class FollowUp:
    """A question asked after the answer (`HFBackend.generate_with_evidence`), as a turn of the answered
    conversation (its tokens after the answer: end of turn, question, start of the reply). The first reply
    position's log-probs of `candidates` are kept; the reply is decoded greedily for at most `max_new_tokens`
    tokens, and no further once `until(text so far)` holds (as `generate_until`)."""

    tail: list[int]
    max_new_tokens: int
    candidates: list[int] = field(default_factory=list)
    until: Callable[[str], bool] | None = None


@dataclass
class EvidenceRequest:
    """What to read of each answer: hidden-state layers (indices, 0 = embeddings), poolings of the answer span
    (`POOLINGS`: mean, last, tbg, slt), ICR features, statements (name -> ids continuing the answer; their last
    token's states) and follow-up questions."""

    layers: list[int]
    poolings: list[str]
    icr: bool = False
    statements: dict[str, list[int]] = field(default_factory=dict)
    follow_ups: dict[str, FollowUp] = field(default_factory=dict)
    # the token pass's parts a decoding step already computes: each answer token's k most likely tokens (observed
    # first; 0 = none) and every head's attention of the choosing query on its own position (RAUQ)
    top_k: int = 0
    prev_attention: bool = False


@dataclass
class Reply:
    """A follow-up's reply: its tokens (a stop token included when one ended it), their log-probs, and the first
    reply position's log-probs of the follow-up's candidates."""

    tokens: list[int]
    logprobs: list[float]
    candidate_logprobs: list[float]


@dataclass
class AnswerEvidence:
    """One answer's evidence: `output` as a teacher-forced pass gives it (pooled states, ICR, statement states,
    entropies of the answer tokens), the follow-ups' replies, and its share of the reader's own seconds per stage
    (`features`, `auxiliary`)."""

    output: ForwardOutput
    replies: dict[str, Reply]
    seconds: dict[str, float] = field(default_factory=dict)  # this answer's share of the reading, per stage


# Poolings of hidden states over a request's span [start, end): see `ForwardOutput.pooled`; besides these,
# "first:N" / "last:N" (N >= 1) average the first / last N tokens of the span (`pooling_window`).
POOLINGS = ("mean", "last", "tbg", "slt")


def pooling_window(name: str) -> tuple[str, int] | None:
    """("first" | "last", N) for a token-selection pooling "first:N" / "last:N", None for another name; a
    malformed N is a ValueError."""
    side, sep, count = name.partition(":")
    if not sep or side not in ("first", "last"):
        return None
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"pooling {name!r}: N must be a positive integer")
    return side, int(count)


def known_pooling(name: str) -> bool:
    return name in POOLINGS or pooling_window(name) is not None
# Per-layer ICR feature columns: JSD between the residual update's projection and the attention distribution,
# summarised over answer tokens, plus the relative size of the update.
ICR_COLUMNS = ("icr_mean", "icr_std", "icr_max", "update_norm_ratio")


class Capability(StrEnum):
    """What a backend can provide: declared on the class, checked once before a run."""

    TEXT = "text"  # greedy answers (`generate`)
    N_SAMPLES = "n_samples"  # K stochastic answers per prompt (`sample`)
    LOGPROBS = "logprobs"  # log-probs of the generated tokens (answers, samples, a reply's first position)
    ENTROPIES = "entropies"  # the full next-token distribution at each generated token (entropies)
    CANDIDATE_LOGPROBS = "candidate_logprobs"  # next-token log-probs of given token ids (`candidate_logprobs`)
    SELF_EVAL_LOGPROBS = "self_eval_logprobs"  # True/False spellings' log-probs in a reply (`self_eval_logprobs`)
    TEACHER_FORCED = "teacher_forced"  # log-probs of given ids: prompt log-probs (`token_pass`, `encode_response`)
    HIDDEN_STATES = "hidden_states"  # per-layer hidden states (`forward`, pooled sample states)
    ATTENTIONS = "attentions"  # attention weights (ICR features, token attention)
    LAYER_COUNT = "layer_count"  # the number of transformer layers (`layer_count`)
    USAGE = "usage"  # calls, tokens and cost accounted per cell (`usage_report`, `reset_usage`)
    REASONING_FIELD = "reasoning_field"  # an endpoint returns its reasoning apart from the answer (a field)


class Backend:
    """Base class; `name` is what stages record as the model id, `fingerprint()` what caches key on.

    `capabilities` declares what the backend can provide; a method outside them raises `unavailable` (or, for
    usage accounting, reports nothing). A class that depends on its configuration narrows it in `declared` (and on
    the instance), so the check before a run needs no instance."""

    kind: str = ""
    capabilities: frozenset[Capability] = frozenset()
    # how this backend turns a seed into samples, when it samples locally (part of the sample stage's key: a changed
    # draw gives other samples for the same seed); "" where the model's server samples
    sampler: str = ""

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    def declared(cls, config: Any) -> frozenset[Capability]:
        """The capabilities an instance made for a run with `config` (a `RunConfig`) will have: the class's own
        unless its configuration narrows them."""
        return cls.capabilities

    @classmethod
    def declared_for(cls, model: str, config: Any) -> frozenset[Capability]:
        """`declared` for one model spec (a backend whose capabilities depend on the model, such as a provider's,
        overrides this)."""
        return cls.declared(config)

    def fingerprint(self) -> dict[str, Any]:
        """Everything that identifies the weights and tokenizer (goes into every stage key)."""
        return {"backend": self.kind, "model": self.name}

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        """Serialise chat messages into the model's prompt text (its chat template, or a role-based format)."""
        raise self.unavailable("chat rendering")

    def turn_suffix(self, question: str) -> str:
        """The prompt text that follows an assistant turn's content when the user then asks `question`: end of
        that turn, the question as a user turn, the start of the next reply (the model's chat template)."""
        marker = "\x00answer\x00"
        rendered = self.render_chat([{"role": "user", "content": "?"}, {"role": "assistant", "content": marker},
                                     {"role": "user", "content": question}])
        if marker not in rendered:
            raise ValueError(f"the chat template of {self.name} drops an assistant turn's content")
        return rendered.split(marker, 1)[1]

    def follow_up(self, prompt: str, answer: str, question: str) -> str:
        """The answered conversation (`prompt` and its `answer`) continued by the user's `question`."""
        return prompt + answer + self.turn_suffix(question)

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                 progress: Any = None) -> list[GenOutput]:
        """Greedy answers for rendered prompts, in input order."""
        raise self.unavailable("greedy generation")

    def generate_until(self, prompts: list[str], until: Callable[[str], bool] | None, *, max_new_tokens: int,
                       batch_size: int, progress: Any = None) -> list[GenOutput]:
        """Greedy answers that may end as soon as `until(text so far)` holds (a backend that cannot stop early
        decodes the whole answer: the default here)."""
        return self.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress)

    def sample(self, prompts: list[str], *, k: int, temperature: float, top_p: float, seeds: Sequence[int],
               max_new_tokens: int, batch_size: int, progress: Any = None,
               hidden: tuple[int, str] | None = None) -> list[list[GenOutput]]:
        """K stochastic answers per prompt (row j of prompt i seeded by `seeds[i]` and j, so an item's samples do
        not depend on which other items share its batch); `token_logprobs` are the model's own log-probs.
        `hidden` = (layer, pooling): a backend that can pool that hidden state over each sample's tokens while it
        decodes puts it in `extra["hidden"]`; the others ignore it (the caller then runs a forward pass)."""
        raise self.unavailable("stochastic sampling")

    def candidate_logprobs(self, prompts: list[str], candidates: Sequence[int], *, max_new_tokens: int,
                           batch_size: int, progress: Any = None) -> list[GenOutput]:
        """First reply position's log-probs of `candidates` in `extra["candidate_logprobs"]`, with the reply text
        (a backend may return only its first token: the probabilities are what is read)."""
        raise self.unavailable("next-token probabilities")

    def shares_heads(self) -> bool:
        """Whether `paired_replies` can answer two prompts per item reading their common head once (`HFBackend`'s
        lean loop); elsewhere the prompts are asked apart."""
        return False

    def fuses_evidence(self) -> bool:
        """Whether greedy decoding can also read each answer's evidence (`generate_with_evidence`)."""
        return False

    def thinks(self) -> bool:
        """Whether this model writes a thinking block before its answer: a local model whose reasoning markers were
        resolved, an endpoint declared to reason (`params`). A role that asks it sizes its reply budget for it."""
        return False

    def generate_with_evidence(self, prompts: list[str], request: EvidenceRequest, *, max_new_tokens: int,
                               batch_size: int, progress: Any = None
                               ) -> tuple[list[GenOutput], list[AnswerEvidence] | None]:
        """Greedy answers and each answer's evidence read on the way (only where `fuses_evidence()`)."""
        raise self.unavailable("evidence read while decoding")

    def paired_replies(self, first: list[str], second: list[str], until: Callable[[str], bool], *,
                       candidates: Sequence[int], max_new_tokens: int,
                       batch_size: int) -> tuple[list[GenOutput], list[GenOutput]]:
        """`first[i]` answered greedily until `until` holds and `second[i]` read for its first reply position's
        log-probs of `candidates`, the head the two prompts share read once (only where `shares_heads()`)."""
        raise self.unavailable("shared-head replies")

    def reply_output(self, reply: Reply, until: Callable[[str], bool] | None = None) -> GenOutput:
        """A follow-up's reply read while decoding (`generate_with_evidence`) as `generate_until` returns it."""
        raise self.unavailable("follow-up replies read while decoding")

    def self_eval_logprobs(self, prompts: list[str], true_words: Sequence[str], false_words: Sequence[str], *,
                           max_new_tokens: int, batch_size: int) -> list[tuple[GenOutput, list[float], list[float]]]:
        """Greedy replies and the log-probs of each True and each False spelling at their first position, read by
        spelling from the reply (`Capability.SELF_EVAL_LOGPROBS`; the others read `candidate_logprobs` by id)."""
        raise self.unavailable("self-evaluation log-probs by spelling")

    def layer_count(self) -> int:
        """Transformer layers L (`Capability.LAYER_COUNT`)."""
        raise self.unavailable("a layer count")

    def reset_usage(self) -> None:
        """Start a new accounting period (`Capability.USAGE`); nothing to reset elsewhere."""

    @contextlib.contextmanager
    def keeping_prompts(self, keep: bool = True) -> Iterator[None]:
        """While inside (with `keep`), greedy decoding keeps each prompt's read state, so that the samples of the
        same prompts start from it instead of reading them again (a local model's lean loop; elsewhere nothing is
        kept: a remote model's prompt cache is its server's)."""
        yield

    def forget_prompts(self) -> None:
        """Drop what `keeping_prompts` kept (the samples are drawn); nothing to drop elsewhere."""

    def usage_report(self) -> dict[str, Any]:
        """Calls, tokens and cost since `reset_usage` (`Capability.USAGE`); empty where nothing is accounted."""
        return {}

    def encode_prompt(self, prompt: str) -> list[int]:
        raise self.unavailable("tokenisation")

    def encode_text(self, text: str) -> list[int]:
        """Token ids of a text continuing a sequence (no special tokens added)."""
        raise self.unavailable("tokenisation")

    def start_ids(self) -> list[int]:
        """The ids a text starts from with nothing before it (the start token): the context of an answer read
        without its prompt (`unconditional` stage)."""
        raise self.unavailable("a start token")

    def window(self) -> int:
        """Longest sequence (tokens) the model accepts."""
        raise self.unavailable("a context window")

    def forward(self, requests: list[ForwardRequest], *, layers: Sequence[int] | None, poolings: Sequence[str],
                logprobs: bool, icr: bool, batch_size: int, progress: Any = None,
                branch_pooling: str = "last") -> list[ForwardOutput]:
        """One teacher-forced pass per batch over the exact ids: log-probs, entropies, pooled hidden states,
        ICR features (attentions are requested only when `icr`), and each request's branches in the same pass,
        pooled over the branch's tokens by `branch_pooling`."""
        raise self.unavailable("teacher-forced hidden states")

    def encode_response(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of a given response (continuing a prompt, no special tokens) with each token's character
        offsets `[start, end)` into `text`."""
        raise self.unavailable("tokenisation with offsets")

    def token_offsets(self, ids: Sequence[int], text: str) -> list[tuple[int, int]]:
        """Character offsets into `text` (the decoded, stripped answer) of each of the answer's token ids."""
        raise self.unavailable("token offsets")

    def token_pass(self, requests: list[TokenRequest], *, top_k: int, entropies: bool, attention: bool,
                   batch_size: int, progress: Any = None, layers: bool = False,
                   prev_attention: bool = False) -> list[TokenOutput]:
        """One teacher-forced pass per batch over prompt + answer ids: the token-level evidence (`TokenOutput`)."""
        raise self.unavailable("teacher-forced token evidence")

    def reads_given(self) -> bool:
        """Whether `read_given` gives a given response's token evidence and pooled states in one pass."""
        return False

    def read_given(self, requests: list[TokenRequest], evidence: EvidenceRequest | None, *, top_k: int,
                   entropies: bool, attention: bool, layers: bool, batch_size: int, token_budget: int,
                   progress: Any = None, prev_attention: bool = False
                   ) -> tuple[list[TokenOutput], list[ForwardOutput] | None]:
        """Given responses read once: `token_pass`'s outputs and, when `evidence` is given, each answer span's
        pooled states as `forward` gives them, batched so that rows x padded width stays within `token_budget`
        (only where `reads_given()`)."""
        raise self.unavailable("given responses read in one pass")

    def redeep_features(self, prompt: str, answer_ids: list[int], context: str, *, top_ratio: float,
                        max_tokens: int) -> Any:
        """ReDeEP's per-head external-context and per-layer parametric-knowledge scores of one answer ([L, H + 1]),
        or the reason (str) it cannot be processed (`haldet.backends.hf.redeep`)."""
        raise self.unavailable("ReDeEP's attention and feed-forward evidence")

    def unavailable(self, what: str) -> SignalUnavailableError:
        return SignalUnavailableError(
            f"the {self.kind!r} backend cannot provide {what}",
            where=f"model {self.name}",
            hint="use a white-box backend (hf) for this model, or drop the detectors that need it",
        )


def role_based_chat(messages: list[dict[str, str]]) -> str:
    """Plain role-based fallback for tokenizers without a chat template."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"
