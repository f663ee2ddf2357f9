"""Each greedy prompt's read state (its KV cache and first-token logits), kept for the samples of the same prompt.

The generate stage reads every prompt to decode its greedy answer; the sample stage then reads the same prompts
again for K samples each. On a small model on CPU that second read is about a sixth of the sample stage, so the
lean loop keeps a copy of each greedy prompt's state here (`decode(keep_into=...)`, `pool.row_alone`) and the
sample stage starts from those states (`decode(take_from=...)`, `pool.rows_joined`) instead of reading the prompts
again. A kept state is exactly what the greedy prefill computed; a fresh prefill of the same prompt in another
batch may differ from it in the last bits of float32 (a batched product rounds a row by its batch neighbours), so
samples drawn from it equal a separate prefill's to that rounding. A byte budget bounds what is kept (prompts
beyond it are read again); states are taken out as they are used, and the cell forgets the rest when its stages
are done (`Backend.forget_prompts`). Plain Python: the states are the caller's tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

# the most memory kept prompt states may take (on top of the decoding pool's budget, `pool_budget.KV_POOL_BYTES`):
# SmolLM2-135M keeps about 7 MB per HaluEval-QA prompt, so the default run's 200 prompts fit
KEPT_PROMPT_BYTES = 3 << 29


class PromptStates:
    """Prompt (its token ids) -> its read state, within `budget` bytes."""

    def __init__(self, budget: int = KEPT_PROMPT_BYTES) -> None:
        self.budget = budget
        self.used = 0
        self.kept: dict[Hashable, tuple[Any, int]] = {}
        self.taken = 0  # prompts that started from a kept state (not read again)

    def keep(self, key: Hashable, nbytes: int, copy: Callable[[], Any]) -> None:
        """Keep the state `copy()` makes (`nbytes` of memory) unless the prompt is kept already or the budget is
        spent (then nothing is copied)."""
        if key not in self.kept and self.used + nbytes <= self.budget:
            self.kept[key] = (copy(), nbytes)
            self.used += nbytes

    def take(self, keys: Sequence[Hashable]) -> list[Any] | None:
        """The states of all `keys`, taken out of the store; None (and nothing taken) unless every one is kept
        (once: a prompt asked twice is read again)."""
        if not keys or len(set(keys)) < len(keys) or any(key not in self.kept for key in keys):
            return None
        states = []
        for key in keys:
            state, nbytes = self.kept.pop(key)
            self.used -= nbytes
            states.append(state)
        self.taken += len(states)
        return states

    def clear(self) -> None:
        self.kept.clear()
        self.used = 0

    def __len__(self) -> int:
        return len(self.kept)
