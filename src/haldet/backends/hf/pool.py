"""The rows the lean loop decodes together (`haldet.backends.hf.decode`): reading prompts into a cache (`prefill`,
its shared token prefix once; `extend` for further tokens), the `Pool` of rows with one decoding `step`, merging
pools as rows end and prompts join (`merge`), copying ended rows out to be continued (`fork`) and such copies into
one (`joined`). How many prompts to read at once is `padding.padded_group`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from haldet.backends.hf.kv_cache import all_growing, cache_arg, copy_rows, growing_cache, rebuilt


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
    n_shared = common_prefix(seqs) if share_prefix and all_growing(cache) else 0
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
        if trim and all_growing(pool.cache):
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

    return Prefilled(cache=rebuilt(pool.cache, own_columns, room), mask=mask, last_pos=pool.last_pos[index].clone(),
                     logits=torch.empty(0))


def joined(states: Sequence[Prefilled], room: int) -> Prefilled:
    """Forked states (`fork`) as one: their caches copied into one, left-padded to the widest, with `room` free
    positions after it (rows in the order given; `merge` does the copying). A single state is returned as it is: a
    fork already has that room."""
    if len(states) == 1:
        return states[0]
    parts, offset = [], 0
    for state in states:
        n = state.mask.shape[0]
        live = torch.ones(n, dtype=torch.bool, device=state.mask.device)
        parts.append(Pool(cache=state.cache, mask=state.mask, last_pos=state.last_pos,
                          rows=torch.arange(offset, offset + n, device=live.device),
                          chosen=torch.zeros_like(state.last_pos), live=live, flush=~live,
                          width=torch.full_like(state.last_pos, -1)))
        offset += n
    pool = merge(parts, room=room)
    assert pool is not None  # every row is live
    return Prefilled(cache=pool.cache, mask=pool.mask, last_pos=pool.last_pos, logits=torch.empty(0))


def column_bytes(cache: Any) -> int:
    """Memory of one cache column: every layer's key and value of one token in one row."""
    return sum(2 * layer.keys.shape[1] * layer.keys.shape[3] * layer.keys.element_size() for layer in cache.layers)


def row_alone(state: Prefilled, row: int) -> Prefilled:
    """Row `row` of a fresh prefill as a state of its own (`prompt_states`): its prompt's columns (a shared prefix
    and its rest, without the padding between them) copied into a cache with no room after them, and its
    first-token logits ([1, V])."""
    columns = state.mask[row].bool().nonzero().flatten()

    def own(filled: torch.Tensor) -> torch.Tensor:
        return filled[row : row + 1, :, columns]

    return Prefilled(cache=rebuilt(state.cache, own, 0, one_block=True),
                     mask=torch.ones((1, len(columns)), dtype=state.mask.dtype, device=state.mask.device),
                     last_pos=state.last_pos[row : row + 1].clone(), logits=state.logits[row : row + 1].clone())


def rows_joined(states: Sequence[Prefilled], room: int) -> Prefilled:
    """States of single rows (`row_alone`) as one prefill: left-padded to the longest, `room` free positions after
    it, their first-token logits stacked. The states are consumed."""
    logits = torch.cat([s.logits for s in states])
    if len(states) == 1:  # `joined` returns a single state as it is: this one has no room
        only = states[0]
        return Prefilled(cache=copy_rows(only.cache, None, only.mask.shape[1], room), mask=only.mask,
                         last_pos=only.last_pos, logits=logits)
    state = joined(states, room)
    state.logits = logits
    return state
