"""A lean incremental decoding loop for the `hf` backend (greedy and seeded sampling).

Why not `model.generate`: for a small model on CPU its per-step bookkeeping costs as much as the model itself.
This loop does per step only what the stages read:
- one forward pass of the still-running rows on a preallocated KV cache (`GrowingCache`: keys/values written in
  place into a buffer sized for prompt + max_new_tokens, so no per-step concatenation copies the whole cache);
- rows that have stopped (a stop token, or `row_done`) leave the batch at once: their cache rows are dropped, so a
  batch no longer runs at the pace of its longest answer;
- the log-prob of the chosen token only (`logit - logsumexp`), never a stacked [batch, steps, vocab] tensor.
Greedy answers are the argmax of the same logits `generate` sees, so they are identical (checked by
tests/test_decode.py on real prompts and by benchmarks/generation.py on 64).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# choose(logits [n, V] float32, rows [n] original row indices) -> chosen token ids [n]
Chooser = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def greedy(logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


@dataclass
class Decoded:
    """Per row: generated ids (the stop token included when one ended the row) and their log-probs."""

    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)


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


def growing_cache(model: Any, capacity: int) -> Any:
    """A DynamicCache whose layers preallocate `capacity` positions; a plain DynamicCache when the model has
    layer kinds other than full attention (sliding windows, linear attention), whose cache logic is their own."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
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


def prefill(model: Any, seqs: Sequence[Sequence[int]], *, capacity: int, pad_id: int,
            share_prefix: bool = True) -> Prefilled:
    """Read the prompts: their shared token prefix once (batch 1, then repeated into every row), then each
    row's own rest, left-padded after the prefix ([prefix][pad..][rest]; positions continue from the prefix and
    padding is masked, so each row sees exactly its prompt). Rows are in the order given."""
    device = model.device
    cache = growing_cache(model, capacity)
    n_shared = common_prefix(seqs) if share_prefix else 0
    if n_shared:
        head = torch.tensor([list(seqs[0][:n_shared])], dtype=torch.long, device=device)
        model(input_ids=head, position_ids=torch.arange(n_shared, device=device)[None], past_key_values=cache,
              use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(len(seqs))
    rests = [list(s[n_shared:]) for s in seqs]
    width = max(len(r) for r in rests)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    rest_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, rest in enumerate(rests):
        ids[row, width - len(rest):] = torch.tensor(rest, dtype=torch.long)
        rest_mask[row, width - len(rest):] = 1
    ids, rest_mask = ids.to(device), rest_mask.to(device)
    positions = n_shared + (rest_mask.cumsum(-1) - 1).clamp_min(0)
    mask = torch.cat([rest_mask.new_ones((len(seqs), n_shared)), rest_mask], dim=-1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                   logits_to_keep=1).logits[:, -1].float()
    return Prefilled(cache=cache, mask=mask, last_pos=positions[:, -1], logits=logits)


def decode(model: Any, seqs: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int],
           pad_id: int, choose: Chooser = greedy, repeat: int = 1, share_prefix: bool = True,
           row_done: Callable[[int, list[int]], bool] | None = None,
           first_logits: Callable[[torch.Tensor], None] | None = None) -> Decoded:
    """Decode each prompt (token ids) for at most `max_new_tokens` steps; `repeat` rows per prompt (row
    `i * repeat + j` is copy j of prompt i: the K samples share the prompt's prefill, and its logits).

    `row_done(row, tokens)` may end a row early (e.g. once a number has been read). `first_logits` receives the
    first step's logits [rows, V] (float32). Call under `torch.inference_mode()`.
    """
    state = prefill(model, seqs, capacity=max(len(s) for s in seqs) + max_new_tokens, pad_id=pad_id,
                    share_prefix=share_prefix)
    cache, mask, last_pos, logits = state.cache, state.mask, state.last_pos, state.logits
    if repeat > 1:
        cache.batch_repeat_interleave(repeat)
        mask, last_pos, logits = (t.repeat_interleave(repeat, dim=0) for t in (mask, last_pos, logits))
    n_rows = logits.shape[0]
    stops = torch.tensor(sorted(stop_ids), dtype=torch.long, device=logits.device)
    out = Decoded(tokens=[[] for _ in range(n_rows)], logprobs=[[] for _ in range(n_rows)])
    rows = torch.arange(n_rows, device=logits.device)
    if first_logits is not None:
        first_logits(logits)
    chosen = rows
    for step in range(max_new_tokens):
        if step:
            logits = model(input_ids=chosen[:, None], attention_mask=mask, position_ids=last_pos[:, None],
                           past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1].float()
        chosen = choose(logits, rows)
        logp = logits.gather(-1, chosen[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        ended = torch.isin(chosen, stops)
        row_list, tok_list, lp_list, end_list = rows.tolist(), chosen.tolist(), logp.tolist(), ended.tolist()
        keep: list[int] = []
        for i, (row, tok, lp) in enumerate(zip(row_list, tok_list, lp_list, strict=True)):
            out.tokens[row].append(tok)
            out.logprobs[row].append(lp)
            if not end_list[i] and not (row_done is not None and row_done(row, out.tokens[row])):
                keep.append(i)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(row_list):  # finished rows leave the batch (and the cache)
            index = torch.tensor(keep, dtype=torch.long, device=rows.device)
            cache.batch_select_indices(index)
            rows, chosen, mask, last_pos = rows[index], chosen[index], mask[index], last_pos[index]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        last_pos = last_pos + 1
    return out
