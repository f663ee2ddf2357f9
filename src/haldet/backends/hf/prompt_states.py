"""Each greedy prompt's read state (its KV cache and first-token logits), kept for the samples of the same prompt.

The generate stage reads every prompt to decode its greedy answer; the sample stage then reads the same prompts
again for K samples each. On a small model on CPU that second read is about a sixth of the sample stage, so the
generate stage's prefills are kept (`keep`, a copy of each row's own columns) and the sample stage starts from them
(`take`) instead of reading the prompts again. Kept states are exact copies of what the greedy prefill computed;
a fresh prefill of the same prompt in another batch may differ from them in the last bits of float32 (a batched
product rounds a row by its batch neighbours), so the samples drawn from them equal a separate prefill's to that
rounding. A byte budget bounds what is kept (prompts beyond it are read again); the sample stage forgets the rest
(`clear`) when it ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from haldet.backends.hf.kv_cache import copy_rows, rebuilt
from haldet.backends.hf.pool import Prefilled, joined

# the most memory kept prompt states may take (on top of the decoding pool's budget, `pool_budget.KV_POOL_BYTES`):
# SmolLM2-135M keeps about 7 MB per HaluEval-QA prompt, so the default run's 200 prompts fit
KEPT_PROMPT_BYTES = 3 << 29


@dataclass
class _Kept:
    state: Prefilled  # one row: its own prompt columns, no padding
    logits: torch.Tensor  # [1, V] float32: the first token's distribution
    nbytes: int


class PromptStates:
    """Prompt token ids -> the read state of that prompt, within `budget` bytes."""

    def __init__(self, budget: int = KEPT_PROMPT_BYTES) -> None:
        self.budget = budget
        self.used = 0
        self.kept: dict[tuple[int, ...], _Kept] = {}
        self.taken = 0  # prompts the samples started from (not read again)

    def keep(self, seqs: Sequence[Sequence[int]], state: Prefilled) -> None:
        """Copy each row of a fresh prefill (`pool.prefill`, rows in the order of `seqs`) while the budget lasts."""
        per_column = sum(2 * layer.keys.shape[1] * layer.keys.shape[3] * layer.keys.element_size()
                         for layer in state.cache.layers)  # keys and values of one token, every layer
        for row, seq in enumerate(seqs):
            key = tuple(seq)
            columns = state.mask[row].bool().nonzero().flatten()  # its prompt's columns (a shared prefix, its rest)
            nbytes = per_column * len(columns)
            if key in self.kept or self.used + nbytes > self.budget:
                continue

            def own(filled: torch.Tensor, r: int = row, c: torch.Tensor = columns) -> torch.Tensor:
                return filled[r : r + 1, :, c]

            cache = rebuilt(state.cache, own, 0)
            self.used += nbytes
            alone = Prefilled(cache=cache, mask=torch.ones((1, len(columns)), dtype=state.mask.dtype,
                                                           device=state.mask.device),
                              last_pos=state.last_pos[row : row + 1].clone(), logits=torch.empty(0))
            self.kept[key] = _Kept(state=alone, logits=state.logits[row : row + 1].clone(), nbytes=nbytes)

    def take(self, seqs: Sequence[Sequence[int]], room: int) -> Prefilled | None:
        """The read state of every prompt of `seqs` as one (left-padded to the longest, `room` free positions after
        it, with their first-token logits), each taken out of the store; None (and nothing taken) unless every one
        of them is kept."""
        keys = [tuple(seq) for seq in seqs]
        if not keys or any(key not in self.kept for key in keys) or len(set(keys)) < len(keys):
            return None
        kept = [self.kept.pop(key) for key in keys]
        self.used -= sum(k.nbytes for k in kept)
        self.taken += len(kept)
        if len(kept) == 1:  # a kept row has no room of its own
            only = kept[0].state
            state = Prefilled(cache=copy_rows(only.cache, None, only.mask.shape[1], room), mask=only.mask,
                              last_pos=only.last_pos, logits=torch.empty(0))
        else:
            state = joined([k.state for k in kept], room)
        state.logits = torch.cat([k.logits for k in kept])
        return state

    def clear(self) -> None:
        self.kept.clear()
        self.used = 0

    def __len__(self) -> int:
        return len(self.kept)

