"""The token pass of the generate stage: token-level evidence from one teacher-forced pass per answer.

For a response that ships with the data, this pass *is* the generate stage: the response is tokenised once (with
character offsets), forced through the proxy model after the prompt, and the same pass yields the token log-probs
of the `Generation` and every token-level signal the selected detectors read. For a generated answer it runs over
the exact generated ids, only when a selected detector reads a token-level signal. No detector runs its own pass.

Parts (each computed only when read): `entropies` and `offsets` (in the generate record, under `tokens`),
`topk` (`topk_ids` int64 and `topk_logprobs` [T, k], observed token at index 0), `attention` ([T, T], max over
layers and heads), `prev_attention` (`attn_prev` [L, H, T], RAUQ's per-head attention on the previous token) and
`layers` (LLM-Check: `attn_logdiag` [L, T], `span_hidden` [L + 1, U + 1] over the item's
units then the whole answer) in `generate/<shard>.h5`. Record field `tokens`: {parts, top_k, entropies, offsets, shard,
arrays: {name: shape}, window, invalid}.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from haldet.backends.base import EvidenceRequest, ForwardOutput, TokenOutput, TokenRequest
from haldet.signals import Signal
from haldet.stages.base import CellContext, Item

TOKEN_PASS_VERSION = "tokens-v1"  # bump when what the pass records changes: part of the generate key

# token part -> signals that read it
PART_SIGNALS: dict[str, frozenset[Signal]] = {
    "entropies": frozenset({Signal.ANSWER_ENTROPIES}),
    "offsets": frozenset({Signal.TOKEN_OFFSETS}),
    "topk": frozenset({Signal.TOKEN_TOPK_IDS, Signal.TOKEN_TOPK_LOGPROBS}),
    "attention": frozenset({Signal.TOKEN_ATTENTION}),
    "layers": frozenset({Signal.TOKEN_ATTN_LOGDIAG, Signal.UNIT_HIDDEN_SCORES}),
    "prev_attention": frozenset({Signal.TOKEN_ATTN_PREV}),
}
ARRAY_PARTS = {"topk": ("topk_ids", "topk_logprobs"), "attention": ("attention",),
               "layers": ("attn_logdiag", "span_hidden"), "prev_attention": ("attn_prev",)}
# the parts a greedy decoding that reads evidence (`Backend.generate_with_evidence`) computes on the way: the
# choosing distributions' entropies and top-k, each step's attention on its own position; offsets need no pass
DECODING_PARTS = frozenset({"entropies", "offsets", "topk", "prev_attention"})
# every signal of the token pass (the generate stage provides them beyond the generation record itself)
TOKEN_PASS_SIGNALS: frozenset[Signal] = frozenset().union(*PART_SIGNALS.values())
SIGNAL_ARRAYS = {Signal.TOKEN_TOPK_IDS: "topk_ids", Signal.TOKEN_TOPK_LOGPROBS: "topk_logprobs",
                 Signal.TOKEN_ATTENTION: "attention", Signal.TOKEN_ATTN_LOGDIAG: "attn_logdiag",
                 Signal.UNIT_HIDDEN_SCORES: "span_hidden", Signal.TOKEN_ATTN_PREV: "attn_prev"}


def token_parts(signals: frozenset[Signal] | None) -> list[str]:
    """The parts of the token pass that these signals read (none when the selection is unknown)."""
    if not signals:
        return []
    return sorted(part for part, read_by in PART_SIGNALS.items() if read_by & signals)


def parts_in_decoding(ctx: CellContext) -> bool:
    """Whether the token parts this cell reads come from the greedy decoding itself (`evidence_in_decoding`, a
    backend that reads evidence while decoding, only `DECODING_PARTS`) rather than a teacher-forced pass over
    prompt + answer again: the same quantities, equal within float tolerance
    (tests/stages/test_tokens_in_decoding.py)."""
    parts = token_parts(ctx.signals)
    return bool(parts and set(parts) <= DECODING_PARTS and ctx.config.evidence_in_decoding
                and ctx.backend.fuses_evidence())


def token_spec(ctx: CellContext) -> dict[str, Any]:
    """What the token pass computes for this cell (part of the generate key when it runs)."""
    parts = token_parts(ctx.signals)
    cfg = ctx.config.tokens
    return {"parts": parts, "top_k": cfg.top_k if "topk" in parts else None, "version": TOKEN_PASS_VERSION}


def unit_spans(item: Item, n_tokens: int, offsets: list[tuple[int, int]] | None) -> list[tuple[int, int]]:
    """Answer-token ranges [a, b) of the item's units (tokens overlapping the unit's characters; (0, 0) when none
    or without offsets), then the whole answer (0, n_tokens)."""
    spans = []
    for unit in item.instance.units:
        hit = [t for t, (a, b) in enumerate(offsets or []) if b > a and a < unit.end and b > unit.start]
        spans.append((hit[0], hit[-1] + 1) if hit else (0, 0))
    return [*spans, (0, n_tokens)]


def _requests(ctx: CellContext, batch: list[Item], answers: dict[str, list[int]],
              offsets: dict[str, list[tuple[int, int]]] | None,
              prefixes: dict[str, list[int]] | None = None) -> list[TokenRequest]:
    """One request per item; `prefixes`: output ids before each answer (a reasoning model's thinking block), read
    as context after the prompt so the answer's evidence is conditioned as it was generated."""
    layers = "layers" in token_parts(ctx.signals)
    return [TokenRequest(prompt_ids=ctx.backend.encode_prompt(item.prompt) + list((prefixes or {}).get(item.id, [])),
                         answer_ids=answers[item.id], key=item.id,
                         spans=unit_spans(item, len(answers[item.id]), (offsets or {}).get(item.id))
                         if layers else [])
            for item in batch]


def run_token_pass(ctx: CellContext, batch: list[Item], answers: dict[str, list[int]],
                   offsets: dict[str, list[tuple[int, int]]] | None = None,
                   prefixes: dict[str, list[int]] | None = None) -> dict[str, TokenOutput]:
    """One pass over each item's prompt (+ its reasoning ids, `prefixes`) + answer ids (`answers`: item id -> answer
    token ids; `offsets`: their character offsets, which the `layers` part needs to find the units' tokens)."""
    parts = token_parts(ctx.signals)
    outs = ctx.backend.token_pass(_requests(ctx, batch, answers, offsets, prefixes),
                                  top_k=ctx.config.tokens.top_k if "topk" in parts else 0,
                                  entropies="entropies" in parts, attention="attention" in parts,
                                  batch_size=ctx.config.tokens.batch_size, layers="layers" in parts,
                                  prev_attention="prev_attention" in parts)
    return {out.key: out for out in outs}


def run_given_pass(ctx: CellContext, batch: list[Item], answers: dict[str, list[int]],
                   offsets: dict[str, list[tuple[int, int]]], evidence: EvidenceRequest | None,
                   prefixes: dict[str, list[int]] | None = None
                   ) -> tuple[dict[str, TokenOutput], dict[str, ForwardOutput]]:
    """Given responses read once (`Backend.read_given`, where the backend can): the token pass's outputs and, for
    `evidence`, each answer's pooled states, batched by `tokens.token_budget`. Elsewhere the token pass alone.
    `prefixes`: a given response's reasoning ids, read after the prompt before its answer."""
    if not ctx.backend.reads_given():
        return run_token_pass(ctx, batch, answers, offsets, prefixes), {}
    parts, cfg = token_parts(ctx.signals), ctx.config.tokens
    outs, found = ctx.backend.read_given(_requests(ctx, batch, answers, offsets, prefixes), evidence,
                                         top_k=cfg.top_k if "topk" in parts else 0, entropies="entropies" in parts,
                                         attention="attention" in parts, layers="layers" in parts,
                                         batch_size=cfg.batch_size, token_budget=cfg.token_budget,
                                         prev_attention="prev_attention" in parts)
    return {out.key: out for out in outs}, {out.key: out for out in found or []}


BEYOND_CONTEXT = "the answer exceeds the model's context"  # how the reason of such an answer's scores begins
CHARS_PER_TOKEN = 8  # a given answer longer than window x this is counted in chunks of that many characters


def beyond_context(encode: Any, text: str, window: int) -> str | None:
    """Why a given answer cannot be read, when it holds at least `window` tokens (it does not fit after a prompt
    token), learned without tokenising all of a long answer: one that fits `window * CHARS_PER_TOKEN` characters
    returns None (it is tokenised whole, as before); a longer one is tokenised a chunk of that many characters at a
    time until its count (less one per chunk boundary, a lower bound) reaches the window, so memory stays that of
    one chunk. `encode`: text -> (ids, offsets), the backend's `encode_response`."""
    chunk = window * CHARS_PER_TOKEN
    if len(text) <= chunk:
        return None
    counted, pos, chunks = 0, 0, 0
    while pos < len(text):
        counted += len(encode(text[pos : pos + chunk])[0])
        pos, chunks = pos + chunk, chunks + 1
        at_least = counted - (chunks - 1)
        if at_least >= window:
            return (f"{BEYOND_CONTEXT}: at least {at_least:,} tokens (in its first "
                    f"{min(pos, len(text)):,} of {len(text):,} characters) against a limit of {window:,} tokens "
                    "with the prompt")
    return None


def token_record(ctx: CellContext, out: TokenOutput, offsets: list[tuple[int, int]] | None,
                 arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """The `tokens` field of a generate record; array parts go into `arrays` (written to the stage's shard)."""
    parts = token_parts(ctx.signals)
    rec: dict[str, Any] = {"parts": parts, "top_k": ctx.config.tokens.top_k if "topk" in parts else None,
                           "entropies": None, "offsets": None, "shard": None, "arrays": {}, "window": out.window,
                           "invalid": None}
    if out.token_logprobs is None:
        rec["invalid"] = (out.window or {}).get("reason", "the token pass gave no output")
        return rec
    if "entropies" in parts and out.entropies is not None:
        rec["entropies"] = [float(x) for x in out.entropies]
    if "offsets" in parts and offsets is not None:
        rec["offsets"] = [[int(a), int(b)] for a, b in offsets]
    if out.topk_ids is not None and out.topk_logprobs is not None:
        arrays["topk_ids"], arrays["topk_logprobs"] = out.topk_ids, out.topk_logprobs
    if out.attention is not None:
        arrays["attention"] = out.attention
    if out.attn_prev is not None:
        arrays["attn_prev"] = out.attn_prev
    if out.attn_logdiag is not None and out.span_hidden is not None:
        arrays["attn_logdiag"], arrays["span_hidden"] = out.attn_logdiag, out.span_hidden
    return rec


def token_value(signal: Signal, rec: dict[str, Any]) -> Any:
    """A JSON-held token signal from a generate record (None when absent or invalid)."""
    tokens = rec.get("tokens") or {}
    if tokens.get("invalid"):
        return None
    if signal is Signal.ANSWER_ENTROPIES:
        values = tokens.get("entropies")
        return None if values is None else np.asarray(values, dtype=np.float64)
    if signal is Signal.TOKEN_OFFSETS:
        values = tokens.get("offsets")
        return None if values is None else np.asarray(values, dtype=np.int64).reshape(-1, 2)
    raise KeyError(signal)
