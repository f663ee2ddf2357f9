"""A lean incremental decoding loop for the `hf` backend (greedy and seeded sampling), with continuous batching.

Why not `model.generate`: for a small model on CPU its per-step bookkeeping costs as much as the model itself, and
a fixed batch runs at the pace of its longest answer. This loop does per step only what the stages read:
- prompts are read (prefilled) a few at a time, in length order (little padding), and their rows join one pool of
  up to `pool_rows` rows decoded together (a decoding step of 64 rows costs about 2.5x one of 8 rows on CPU, so
  large pools decode more tokens per second); rows that end leave the pool and waiting prompts take their places;
- the pool's KV cache lives in preallocated buffers (`GrowingLayer`: keys/values written in place, room for
  `max_new_tokens`), rows left-padded to one width; a merge (rows joining, ended rows dropped) is one copy, and
  columns no row reads any more are trimmed away;
- the log-prob of the chosen token only (`logit - logsumexp`), never a stacked [batch, steps, vocab] tensor;
- an evidence reader (`Reader`, haldet.backends.hf.answer_reader) may keep the states each step computes anyway and
  continue each ended row's cache (`fork`) before the row leaves the pool.
Greedy answers are the argmax of the same logits `generate` sees, so they are identical up to the last bits of
batched arithmetic (checked by tests/backends/test_decode.py on real prompts and counted by benchmarks/generation.py).
This module is the loop; the cache it writes is `kv_cache`, its rows and their merges are `pool`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from haldet.backends.hf.kv_cache import mergeable
from haldet.backends.hf.padding import padded_group
from haldet.backends.hf.pool import Pool, Prefilled, column_bytes, extend, merge, prefill, row_alone, rows_joined
from haldet.backends.hf.prompt_states import PromptStates

# choose(logits [n, V] float32, rows [n] original row indices) -> chosen token ids [n]
Chooser = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def greedy(logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


@dataclass
class Decoded:
    """Per row: generated ids (the stop token included when one ended the row) and their log-probs; with
    `hidden_layer`, the hidden state of that layer pooled over the row's tokens ([D] float32, `states`)."""

    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    states: torch.Tensor | None = None


class Reader(Protocol):
    """What `decode` shows an evidence reader (haldet.backends.hf.answer_reader) while it decodes."""

    def admitted(self, rows: torch.Tensor, state: Prefilled) -> None:
        """Rows whose prompts were just read, with every layer's states over the prompts."""

    def chose(self, rows: torch.Tensor, logits: torch.Tensor) -> None:
        """The logits [n, V] (float32) from which these rows choose their next token."""

    def stepping(self) -> AbstractContextManager[Any]:
        """Entered around each decoding step."""

    def stepped(self, pool: Pool, fed: torch.Tensor, states: tuple[torch.Tensor, ...]) -> None:
        """Every layer's states ([R, 1, D] each) of the step in which rows `fed` of the pool read a token."""

    def ended(self, pool: Pool, index: torch.Tensor) -> None:
        """Rows `index` of the pool have ended and are about to leave it (`fork` copies their caches)."""

    def boarding(self) -> list[Pool]:
        """Pool parts of the reader's own rows (negative row ids: follow-up replies) to decode in the pool."""

    def rode(self, ids: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The reader's rows `ids` chose from `logits` [n, V]: their next tokens and which have ended."""

    def finish_branches(self) -> None:
        """No answer row will end any more: read what waits for more rows now (its replies then board)."""


def keep(states: PromptStates, seqs: Sequence[Sequence[int]], state: Prefilled) -> None:
    """Keep each prompt's row of a fresh prefill in `states` while their budget lasts (copied: decoding writes on)."""
    per_column = column_bytes(state.cache)
    for row, seq in enumerate(seqs):
        states.keep(tuple(seq), per_column * int(state.mask[row].sum()), functools.partial(row_alone, state, row))


def decode(model: Any, seqs: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int],
           pad_id: int, choose: Chooser = greedy, repeat: int = 1, share_prefix: bool = True,
           row_done: Callable[[int, list[int]], bool] | None = None, prefill_batch: int = 8, pool_rows: int = 64,
           on_prompt_done: Callable[[int], None] | None = None, hidden_layer: int | None = None,
           hidden_pooling: str = "mean", tails: Sequence[Sequence[Sequence[int]]] | None = None,
           on_first: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
           reader: Reader | None = None, keep_into: PromptStates | None = None,
           take_from: PromptStates | None = None) -> Decoded:
    """Decode each prompt (token ids) for at most `max_new_tokens` steps; `repeat` rows per prompt (row
    `i * repeat + j` is copy j of prompt i: the K samples share the prompt's prefill, and its logits).

    Continuous batching: prompts are read in the order given (sort them by length: less padding), at most
    `prefill_batch` at a time, and their rows join one pool of up to `pool_rows` rows decoded together; rows that
    end leave it and waiting prompts take their places. `row_done(row, tokens)` may end a row early (e.g. once a
    number has been read); `on_prompt_done(i)` is called once every row of prompt i has ended.

    `tails[i][j]` (non-empty token lists): row j of prompt i reads these tokens after the prompt, which is then a
    head its rows share (read once: two questions about the same text). `on_first(rows, logits)` receives each
    admitted row's first-step logits [n, V] (float32) with the rows' indices.

    `hidden_layer` (an index into the model's hidden states, -1 = last): pool that layer's state over each row's
    generated tokens ("mean" or "last"), as a teacher-forced pass over prompt + answer would, from the decoding
    steps themselves: a row cut by the token limit (or `row_done`) feeds its last token once more, so that token's
    state is read too; a stop token is not part of the answer (nor of its state); an empty answer's state is NaN.

    `reader` (`Reader`) is shown each row's prompt states, choosing logits and step states as they are computed,
    and each ended row once, with its cache, before the row leaves the pool (the same flush rule applies). Rows of
    its own (`boarding`: follow-up replies, negative row ids) join the pool at its merges and ride in its steps
    (`rode`): a decoding step of a small model costs mostly the same with a few rows more, so replies decoded
    beside the answers cost a fraction of the steps they would take alone. They do not count against `pool_rows`
    (their caches waited in memory before boarding too).
    `keep_into` keeps each prompt's read state (`PromptStates.keep`: the greedy answers' prompts, for their samples);
    a group of prompts all kept in `take_from` starts from those states instead of being read again (the samples).
    Call under `torch.inference_mode()`.
    """
    n_rows = len(seqs) * repeat
    out = Decoded(tokens=[[] for _ in range(n_rows)], logprobs=[[] for _ in range(n_rows)])
    capture = hidden_layer is not None or reader is not None
    counts = torch.zeros(n_rows, device=model.device)
    stops = torch.tensor(sorted(stop_ids), dtype=torch.long, device=model.device)
    rows_left = [repeat] * len(seqs)

    def record(logits: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Choose each row's next token, store it and its log-prob; which rows have ended."""
        if reader is not None:
            reader.chose(rows, logits)
        chosen = choose(logits, rows)
        logp = logits.gather(-1, chosen[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        ended = torch.isin(chosen, stops).tolist()
        for i, (row, tok, lp) in enumerate(zip(rows.tolist(), chosen.tolist(), logp.tolist(), strict=True)):
            tokens = out.tokens[row]
            tokens.append(tok)
            out.logprobs[row].append(lp)
            if not ended[i]:
                ended[i] = len(tokens) >= max_new_tokens or (row_done is not None and row_done(row, tokens))
            if ended[i]:
                rows_left[row // repeat] -= 1
                if on_prompt_done is not None and rows_left[row // repeat] == 0:
                    on_prompt_done(row // repeat)
        return chosen, torch.tensor(ended, dtype=torch.bool, device=logits.device)

    def admit(first: int, count: int) -> Pool:
        """Read prompts first..first+count-1 and choose their rows' first tokens."""
        group = seqs[first : first + count]
        group_tails = [tail for per_prompt in tails[first : first + count] for tail in per_prompt] if tails else []
        room = max((len(t) for t in group_tails), default=0) + max_new_tokens
        kept = take_from.take([tuple(s) for s in group]) if take_from is not None and can_merge else None
        if kept is not None:  # every prompt of the group was read by the greedy decoding: start from its state
            state = rows_joined(kept, room)
        else:
            state = prefill(model, group, capacity=max(len(s) for s in group) + room,
                            pad_id=pad_id, share_prefix=share_prefix, states=reader is not None)
            if keep_into is not None and can_merge:
                keep(keep_into, group, state)
        if reader is not None:
            reader.admitted(torch.arange(first * repeat, (first + count) * repeat, device=model.device), state)
        cache, mask, last_pos, logits = state.cache, state.mask, state.last_pos, state.logits
        if repeat > 1:
            cache.batch_repeat_interleave(repeat)
            mask, last_pos, logits = (t.repeat_interleave(repeat, dim=0) for t in (mask, last_pos, logits))
        if group_tails:
            state = extend(model, Prefilled(cache=cache, mask=mask, last_pos=last_pos, logits=logits), group_tails,
                           pad_id=pad_id)
            mask, last_pos, logits = state.mask, state.last_pos, state.logits
        rows = torch.arange(first * repeat, (first + count) * repeat, device=logits.device)
        if on_first is not None:
            on_first(rows, logits)
        chosen, ended = record(logits, rows)
        flush = unread(chosen, ended)
        width = torch.where(ended & ~flush, mask.shape[1], -1)
        return Pool(cache=cache, mask=mask, last_pos=last_pos, rows=rows, chosen=chosen, live=~ended, flush=flush,
                     width=width)

    def unread(chosen: torch.Tensor, ended: torch.Tensor) -> torch.Tensor:
        """Ended rows whose last token is part of the answer (not a stop token): its state is still to be read."""
        return ended & ~torch.isin(chosen, stops) if capture else torch.zeros_like(ended)

    def absorb(pool: Pool, index: torch.Tensor, hidden: torch.Tensor) -> None:
        """Pool the step's hidden states of the rows that fed one of their own tokens (running or flushing)."""
        rows, states = pool.rows[index], hidden[index]
        if out.states is None:
            out.states = states.new_zeros((n_rows, states.shape[-1]))
        counts.index_add_(0, rows, torch.ones_like(rows, dtype=counts.dtype))
        if hidden_pooling == "mean":
            out.states.index_add_(0, rows, states)
        else:
            out.states[rows] = states

    can_merge = mergeable(model.config)
    if tails is not None and not can_merge:
        raise ValueError("per-row tails need a full-attention cache (padding between head and tail would shift a "
                         "sliding window); ask the prompts apart")
    if reader is not None and not can_merge:
        raise ValueError("reading answers' branches needs a full-attention cache")

    def leave(pool: Pool | None) -> None:
        """The pool's ended rows are about to leave it: the reader sees each once, with its cache (its own riding
        rows are not answers)."""
        if reader is not None and pool is not None:
            index = (~pool.active).nonzero().flatten()
            index = index[pool.rows[index] >= 0]
            if len(index):
                reader.ended(pool, index)

    def answers(pool: Pool) -> torch.Tensor:
        """The pool's answer rows (not the reader's riders)."""
        return pool.rows >= 0

    def riders() -> list[Pool]:
        return reader.boarding() if reader is not None else []

    refill_at = max(repeat, pool_rows // 4)  # free rows that make it worth reading more prompts (one merge copy)
    pool: Pool | None = None
    waiting = 0  # the next prompt to read
    answers_over = reader is None  # every answer row has ended and left, the reader told so (`finish_branches`)
    while True:
        live = int((pool.live & answers(pool)).sum()) if pool is not None else 0
        busy = int(pool.active.sum()) if pool is not None else 0
        free = pool_rows - live
        wanted = min(refill_at, (len(seqs) - waiting) * repeat)
        if waiting < len(seqs) and (busy == 0 or (can_merge and free >= wanted)):
            parts = [pool] if pool is not None and busy else []
            leave(pool)
            while waiting < len(seqs) and (free >= repeat or not parts):
                count = padded_group(seqs, waiting, min(prefill_batch, max(1, free // repeat)))
                part = admit(waiting, count)
                leave(part)  # rows that ended at their first token (a stop token) leave at the merge below
                parts.append(part)
                waiting += count
                free -= count * repeat
                if not can_merge:
                    break
            pool = merge([*parts, *riders()], room=max_new_tokens)
            del parts  # the merged-in parts' caches are gone; drop them before decoding on
        elif pool is None or busy == 0:
            leave(pool)
            break
        elif not answers_over and waiting == len(seqs) and not bool((pool.active & answers(pool)).any()):
            # only riders are left: the reader's last branches now, their replies ride with them
            answers_over = True
            leave(pool)
            reader.finish_branches()  # type: ignore[union-attr]
            pool = merge([pool, *riders()], room=max_new_tokens)
        elif 4 * (pool.n - busy) >= busy:  # ended rows are a fifth of the pool: stop computing them
            leave(pool)
            pool = merge([pool, *riders()], room=max_new_tokens)
        if pool is None or not bool(pool.active.any()):
            continue
        fed = pool.active.nonzero().flatten()
        with reader.stepping() if reader is not None else nullcontext():
            logits, hidden = pool.step(model, capture)
        live_index = pool.live.nonzero().flatten()
        if reader is not None:  # the reader's riding rows: their tokens are its own
            fed = fed[pool.rows[fed] >= 0]
            riding = live_index[pool.rows[live_index] < 0]
            live_index = live_index[pool.rows[live_index] >= 0]
            if len(riding):
                chosen, ended = reader.rode(pool.rows[riding], logits[riding])
                pool.chosen[riding] = chosen
                pool.live[riding[ended]] = False
        if hidden is not None:
            if hidden_layer is not None:
                absorb(pool, fed, hidden[hidden_layer][:, -1].float())
            if reader is not None:
                reader.stepped(pool, fed, hidden)
            pool.flush[:] = False
        if len(live_index):
            chosen, ended = record(logits if len(live_index) == pool.n else logits[live_index],
                                   pool.rows[live_index])
            pool.chosen[live_index] = chosen
            pool.live[live_index[ended]] = False
            pool.flush[live_index] = unread(chosen, ended)
        pool.width[fed[~pool.active[fed]]] = pool.mask.shape[1]  # rows that fed their last token this step
    if out.states is not None:
        if hidden_pooling == "mean":
            out.states /= counts.clamp_min(1)[:, None]
        out.states[counts == 0] = float("nan")  # an empty answer (a stop token first) has no state
    return out
