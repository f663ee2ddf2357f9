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
batched arithmetic (checked by tests/test_decode.py on real prompts and counted by benchmarks/generation.py).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

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


def cache_arg(model: Any, cache: Any) -> dict[str, Any]:
    """The KV cache as the keyword this transformers names it: `cache` since transformers 5.x (where
    `past_key_values` is deprecated and warns on every call), `past_key_values` before."""
    return {_cache_keyword(type(model)): cache}  # type: ignore[arg-type]


@functools.cache
def _cache_keyword(model_class: Any) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@functools.cache
def _layer_class() -> type:
    """`GrowingLayer` subclasses transformers' DynamicLayer (imported lazily: transformers is heavy)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):  # type: ignore[misc]
        """A DynamicLayer whose keys/values live in a buffer with room for `capacity` positions: an update writes
        the new positions in place and returns views of the filled part (the same values `torch.cat` gives)."""

        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = capacity
            self.length = 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                b, h, _, d = key_states.shape
                size = max(self.capacity, key_states.shape[-2])
                self.key_buffer = key_states.new_empty((b, h, size, d))
                self.value_buffer = value_states.new_empty((b, h, size, d))
            new = key_states.shape[-2]
            if self.length + new > self.key_buffer.shape[-2]:  # past the planned capacity: grow (rare)
                extra = max(new, self.key_buffer.shape[-2])
                self.key_buffer = torch.cat([self.key_buffer, self.key_buffer.new_empty(
                    (*self.key_buffer.shape[:2], extra, self.key_buffer.shape[-1]))], dim=-2)
                self.value_buffer = torch.cat([self.value_buffer, self.value_buffer.new_empty(
                    (*self.value_buffer.shape[:2], extra, self.value_buffer.shape[-1]))], dim=-2)
            self.key_buffer[:, :, self.length : self.length + new] = key_states
            self.value_buffer[:, :, self.length : self.length + new] = value_states
            self.length += new
            self.keys = self.key_buffer[:, :, : self.length]
            self.values = self.value_buffer[:, :, : self.length]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def adopt(self, key_buffer: torch.Tensor, value_buffer: torch.Tensor, length: int) -> None:
            """Take over buffers whose first `length` positions are filled (a merged pool's)."""
            self.key_buffer, self.value_buffer, self.length = key_buffer, value_buffer, length
            self.keys = self.key_buffer[:, :, : self.length]
            self.values = self.value_buffer[:, :, : self.length]

        def trim_left(self, n: int) -> None:
            """Drop the first `n` positions (padding no row reads any more): a view, no copy."""
            self.adopt(self.key_buffer[:, :, n:], self.value_buffer[:, :, n:], self.length - n)

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.length:
                self.key_buffer = self.key_buffer.repeat_interleave(repeats, dim=0)
                self.value_buffer = self.value_buffer.repeat_interleave(repeats, dim=0)
                self.keys = self.key_buffer[:, :, : self.length]
                self.values = self.value_buffer[:, :, : self.length]

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.length:
                self.key_buffer = self.key_buffer[indices]
                self.value_buffer = self.value_buffer[indices]
                self.keys = self.key_buffer[:, :, : self.length]
                self.values = self.value_buffer[:, :, : self.length]

    return GrowingLayer


def growing_cache(config: Any, capacity: int) -> Any:
    """A DynamicCache whose layers preallocate `capacity` positions; a plain DynamicCache when the model (its
    config) has layer kinds other than full attention (sliding windows, linear attention), whose cache logic is
    their own."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    from transformers.cache_utils import DynamicLayer

    if all(type(layer) is DynamicLayer for layer in cache.layers):
        layer_cls = _layer_class()
        cache.layers = [layer_cls(capacity) for _ in cache.layers]
    return cache


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix every sequence shares, leaving each at least one token of its own."""
    if len(seqs) < 2:
        return 0
    shortest = min(len(s) for s in seqs) - 1
    n = 0
    while n < shortest and all(s[n] == seqs[0][n] for s in seqs):
        n += 1
    return n


@dataclass
class Prefilled:
    """The state after reading the prompts: cache, attention mask, each row's last position, last logits."""

    cache: Any
    mask: torch.Tensor
    last_pos: torch.Tensor
    logits: torch.Tensor
    # with `states=True`: every hidden-state layer over the shared prefix ([1, n, D] each, None without one) and
    # over the rows' own rests ([rows, width, D] each, left-padded)
    head_states: tuple[torch.Tensor, ...] | None = None
    rest_states: tuple[torch.Tensor, ...] | None = None


def prefill(model: Any, seqs: Sequence[Sequence[int]], *, capacity: int, pad_id: int,
            share_prefix: bool = True, states: bool = False) -> Prefilled:
    """Read the prompts: their shared token prefix once (batch 1, then repeated into every row), then each
    row's own rest, left-padded after the prefix ([prefix][pad..][rest]; positions continue from the prefix and
    padding is masked, so each row sees exactly its prompt). Rows are in the order given. A model with
    sliding-window layers gets plain left padding: its window counts cache columns, so padding between the prefix
    and the rest would push prefix tokens out of it. `states`: keep every layer's hidden states of the prompt
    tokens (`head_states`, `rest_states`)."""
    device = model.device
    cache = growing_cache(model.config, capacity)
    n_shared = common_prefix(seqs) if share_prefix and _all_growing(cache) else 0
    head_states = None
    if n_shared:
        head = torch.tensor([list(seqs[0][:n_shared])], dtype=torch.long, device=device)
        out = model(input_ids=head, position_ids=torch.arange(n_shared, device=device)[None], **cache_arg(model, cache),
                    use_cache=True, logits_to_keep=1, output_hidden_states=states)
        head_states = out.hidden_states if states else None
        cache.batch_repeat_interleave(len(seqs))
    mask = torch.ones((len(seqs), n_shared), dtype=torch.long, device=device)
    last_pos = torch.full((len(seqs),), n_shared - 1, dtype=torch.long, device=device)
    state = extend(model, Prefilled(cache=cache, mask=mask, last_pos=last_pos, logits=torch.empty(0)),
                   [s[n_shared:] for s in seqs], pad_id=pad_id, states=states)
    state.head_states = head_states
    return state


def extend(model: Any, state: Prefilled, rests: Sequence[Sequence[int]], *, pad_id: int,
           states: bool = False) -> Prefilled:
    """Read each row's own further tokens after what its cache holds, left-padded among the rows
    ([cached][pad..][rest]; positions continue each row's own, padding is masked)."""
    width = max(len(r) for r in rests)
    ids = torch.full((len(rests), width), pad_id, dtype=torch.long)
    rest_mask = torch.zeros((len(rests), width), dtype=torch.long)
    for row, rest in enumerate(rests):
        ids[row, width - len(rest):] = torch.tensor(list(rest), dtype=torch.long)
        rest_mask[row, width - len(rest):] = 1
    ids, rest_mask = ids.to(model.device), rest_mask.to(model.device)
    positions = state.last_pos[:, None] + 1 + (rest_mask.cumsum(-1) - 1).clamp_min(0)
    mask = torch.cat([state.mask, rest_mask], dim=-1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_arg(model, state.cache),
                use_cache=True, logits_to_keep=1, output_hidden_states=states)
    return Prefilled(cache=state.cache, mask=mask, last_pos=positions[:, -1], logits=out.logits[:, -1].float(),
                     rest_states=out.hidden_states if states else None)


def _all_growing(cache: Any) -> bool:
    """Whether every layer of the cache is a `GrowingLayer` (full attention, preallocated)."""
    return all(isinstance(layer, _layer_class()) for layer in cache.layers)


def mergeable(config: Any) -> bool:
    """Whether a model with this config gets a cache of `GrowingLayer`s (full attention only), whose rows can be
    merged across prompts at different widths and padded in the middle (a shared prefix, a head before tails)."""
    return _all_growing(growing_cache(config, 1))


@dataclass
class Pool:
    """Rows decoded together: their cache (left-padded to one width), mask, last positions, global row ids, next
    input tokens, which rows still choose tokens (`live`), which have ended but still feed their last token once to
    read its hidden state (`flush`), and for an ended row the cache width it filled (`width`; later steps write
    columns it never reads)."""

    cache: Any
    mask: torch.Tensor
    last_pos: torch.Tensor
    rows: torch.Tensor
    chosen: torch.Tensor
    live: torch.Tensor
    flush: torch.Tensor
    width: torch.Tensor

    @property
    def n(self) -> int:
        return int(self.rows.shape[0])

    @property
    def n_live(self) -> int:
        return int(self.live.sum())

    @property
    def active(self) -> torch.Tensor:
        return self.live | self.flush

    def step(self, model: Any, states: bool) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """One forward pass of every row at its next position: the rows' logits [R, V] (float32) and, with
        `states`, every layer's states ([R, 1, D] each). Ended rows (not yet dropped) keep their position: their
        outputs are not read, and they never run past the positions their prompt and answer used."""
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.n, 1))], dim=-1)
        self.last_pos = self.last_pos + self.active.long()
        out = model(input_ids=self.chosen[:, None], attention_mask=self.mask, position_ids=self.last_pos[:, None],
                    **cache_arg(model, self.cache), use_cache=True, logits_to_keep=1, output_hidden_states=states)
        return out.logits[:, -1].float(), out.hidden_states if states else None


def _first_read_column(mask: torch.Tensor) -> int:
    """The first cache column some row reads (the columns before it are padding for every row)."""
    return int(mask.any(dim=0).long().argmax())


def merge(parts: list[Pool], *, room: int) -> Pool | None:
    """One pool of the still-running rows of `parts` (None when there are none): one copy of their caches into
    buffers left-padded to a common width, with `room` free positions after it; leading columns that no row reads
    are left out. A single part is only compacted in place (rows selected, leading padding trimmed). The parts are
    consumed: each layer of theirs is emptied once it is copied, so a merge holds about one pool's cache plus one
    layer, not two pools' (the first part's cache becomes the pool's)."""
    chosen = [(p, p.active.nonzero().flatten()) for p in parts]
    chosen = [(p, index) for p, index in chosen if len(index)]
    if not chosen:
        return None
    if len(chosen) == 1:
        pool, index = chosen[0]
        if len(index) < pool.n:
            pool.cache.batch_select_indices(index)
            pool.mask, pool.last_pos, pool.rows, pool.chosen, pool.live, pool.flush, pool.width = (
                t[index] for t in (pool.mask, pool.last_pos, pool.rows, pool.chosen, pool.live, pool.flush,
                                   pool.width))
        trim = _first_read_column(pool.mask)
        if trim and _all_growing(pool.cache):
            for layer in pool.cache.layers:
                layer.trim_left(trim)
            pool.mask = pool.mask[:, trim:]
        return pool
    masks = [p.mask[index] for p, index in chosen]
    starts = [_first_read_column(m) for m in masks]
    widths = [m.shape[1] - s for m, s in zip(masks, starts, strict=True)]
    width, n_rows = max(widths), sum(len(index) for _, index in chosen)
    cache = chosen[0][0].cache
    for li, layer in enumerate(cache.layers):
        _, heads, _, dim = layer.keys.shape
        buffers = [layer.keys.new_empty((n_rows, heads, width + room, dim)) for _ in range(2)]
        row = 0
        for (part, index), start, w in zip(chosen, starts, widths, strict=True):
            source = part.cache.layers[li]
            for buffer, filled in zip(buffers, (source.keys, source.values), strict=True):
                block = filled[:, :, start:] if len(index) == part.n else filled[index][:, :, start:]
                buffer[row : row + len(index), :, : width - w].zero_()  # padding: finite, and masked
                buffer[row : row + len(index), :, width - w : width] = block
            row += len(index)
        layer.adopt(buffers[0], buffers[1], width)
        for part, _ in chosen[1:]:  # copied: free this layer of the other parts now, not when the merge returns
            emptied = part.cache.layers[li]
            nothing = emptied.keys.new_empty((0, heads, 0, dim))  # a fresh tensor: a view would keep the storage
            emptied.adopt(nothing, nothing, 0)
    mask = torch.cat([torch.nn.functional.pad(m[:, s:], (width - w, 0))
                      for m, s, w in zip(masks, starts, widths, strict=True)])
    joined = [torch.cat([getattr(p, name)[index] for p, index in chosen])
              for name in ("last_pos", "rows", "chosen", "live", "flush", "width")]
    return Pool(cache=cache, mask=mask, last_pos=joined[0], rows=joined[1], chosen=joined[2], live=joined[3],
                 flush=joined[4], width=joined[5])


def fork(pool: Pool, index: torch.Tensor, room: int) -> Prefilled:
    """Rows `index` of the pool as they ended, copied into a cache of their own with `room` free positions: each
    row's answered conversation (the columns it filled and reads; columns written after it ended, and padding, are
    left out), ready to be continued (`extend` with branches, further decoding). The rows' columns are packed to
    the right ([pad..][own columns]): a key carries its position in its rotary embedding, not in its column, so
    the continuation reads only as many columns as the longest conversation holds, not the pool's width."""
    widths = pool.width[index]
    width = int(widths.max())
    own = pool.mask[index, :width].bool()
    own[torch.arange(width, device=own.device)[None, :] >= widths[:, None]] = False
    counts = own.sum(dim=-1)
    packed = int(counts.max())
    # for each row, its own columns in order, after `packed - count` padding columns (which read column 0, masked)
    order = torch.sort(own.long(), dim=-1, stable=True).indices[:, width - packed:]  # [n, packed]
    mask = (torch.arange(packed, device=own.device)[None, :] >= (packed - counts)[:, None]).long()
    order = order * mask

    def own_columns(filled: torch.Tensor) -> torch.Tensor:
        rows = filled[:, :, :width][index]
        n, heads, _, dim = rows.shape
        return torch.gather(rows, 2, order[:, None, :, None].expand(n, heads, packed, dim))

    return Prefilled(cache=_rebuilt(pool.cache, own_columns, room), mask=mask, last_pos=pool.last_pos[index].clone(),
                     logits=torch.empty(0))


def copy_rows(cache: Any, index: torch.Tensor | None, width: int, room: int) -> Any:
    """A cache of `GrowingLayer`s of its own (writes to it do not reach `cache`): rows `index` (all: None) of
    `cache`'s first `width` columns, with `room` free positions after them."""
    return _rebuilt(cache, lambda filled: (filled if index is None else filled[index])[:, :, :width], room)


def _rebuilt(cache: Any, take: Callable[[torch.Tensor], torch.Tensor], room: int) -> Any:
    """A copy of `cache` whose every layer holds `take(keys)` and `take(values)` ([rows, heads, columns, dim]) in
    buffers of its own, with `room` free positions after them."""
    copied = copy.copy(cache)
    copied.layers = []
    for layer in cache.layers:
        new = copy.copy(layer)
        buffers = []
        for filled in (layer.keys, layer.values):
            rows = take(filled)
            buffer = rows.new_empty((*rows.shape[:2], rows.shape[2] + room, rows.shape[3]))
            buffer[:, :, : rows.shape[2]] = rows
            buffers.append(buffer)
        new.adopt(buffers[0], buffers[1], buffers[0].shape[2] - room)
        copied.layers.append(new)
    return copied


def prefill_group(seqs: Sequence[Sequence[int]], first: int, most: int, waste: float = 0.25) -> int:
    """How many prompts from `first` on to read together: at most `most`, and no more once left-padding them to the
    longest would add over `waste` of their own tokens (in length order, an outlier waits for its own group)."""
    count, tokens, longest = 1, len(seqs[first]), len(seqs[first])
    while count < most and first + count < len(seqs):
        nxt = len(seqs[first + count])
        if max(longest, nxt) * (count + 1) > (1 + waste) * (tokens + nxt):
            break
        count, tokens, longest = count + 1, tokens + nxt, max(longest, nxt)
    return count


def decode(model: Any, seqs: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int],
           pad_id: int, choose: Chooser = greedy, repeat: int = 1, share_prefix: bool = True,
           row_done: Callable[[int, list[int]], bool] | None = None, prefill_batch: int = 8, pool_rows: int = 64,
           on_prompt_done: Callable[[int], None] | None = None, hidden_layer: int | None = None,
           hidden_pooling: str = "mean", tails: Sequence[Sequence[Sequence[int]]] | None = None,
           on_first: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
           reader: Reader | None = None) -> Decoded:
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
    and each ended row once, with its cache, before the row leaves the pool (the same flush rule applies).
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
        state = prefill(model, group, capacity=max(len(s) for s in group) + room,
                        pad_id=pad_id, share_prefix=share_prefix, states=reader is not None)
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
        """The pool's ended rows are about to leave it: the reader sees each once, with its cache."""
        if reader is not None and pool is not None:
            index = (~pool.active).nonzero().flatten()
            if len(index):
                reader.ended(pool, index)

    refill_at = max(repeat, pool_rows // 4)  # free rows that make it worth reading more prompts (one merge copy)
    pool: Pool | None = None
    waiting = 0  # the next prompt to read
    while True:
        live = pool.n_live if pool is not None else 0
        busy = int(pool.active.sum()) if pool is not None else 0
        free = pool_rows - live
        wanted = min(refill_at, (len(seqs) - waiting) * repeat)
        if waiting < len(seqs) and (busy == 0 or (can_merge and free >= wanted)):
            parts = [pool] if pool is not None and busy else []
            leave(pool)
            while waiting < len(seqs) and (free >= repeat or not parts):
                count = prefill_group(seqs, waiting, min(prefill_batch, max(1, free // repeat)))
                part = admit(waiting, count)
                leave(part)  # rows that ended at their first token (a stop token) leave at the merge below
                parts.append(part)
                waiting += count
                free -= count * repeat
                if not can_merge:
                    break
            pool = merge(parts, room=max_new_tokens)
            del parts  # the merged-in parts' caches are gone; drop them before decoding on
        elif pool is None or busy == 0:
            leave(pool)
            break
        elif 4 * (pool.n - busy) >= busy:  # ended rows are a fifth of the pool: stop computing them
            leave(pool)
            pool = merge([pool], room=max_new_tokens)
        if pool is None or not bool(pool.active.any()):
            continue
        fed = pool.active.nonzero().flatten()
        with reader.stepping() if reader is not None else nullcontext():
            logits, hidden = pool.step(model, capture)
        if hidden is not None:
            if hidden_layer is not None:
                absorb(pool, fed, hidden[hidden_layer][:, -1].float())
            if reader is not None:
                reader.stepped(pool, fed, hidden)
            pool.flush[:] = False
        live_index = pool.live.nonzero().flatten()
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
