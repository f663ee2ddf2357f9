"""How many length-sorted sequences one forward pass reads together: prompts read into the decoding pool
(`decode`, `lean`) and answers in the teacher-forced token pass (`tokens`), so that padding to the longest adds at
most a set share of their own tokens. Plain Python: no torch import."""

from __future__ import annotations

from collections.abc import Sequence


def padded_group(seqs: Sequence[Sequence[int]], first: int, most: int, waste: float = 0.25) -> int:
    """How many sequences from `first` on to read together: at most `most`, and no more once padding them to the
    longest would add over `waste` of their own tokens (in length order, an outlier waits for its own group)."""
    count, tokens, longest = 1, len(seqs[first]), len(seqs[first])
    while count < most and first + count < len(seqs):
        nxt = len(seqs[first + count])
        if max(longest, nxt) * (count + 1) > (1 + waste) * (tokens + nxt):
            break
        count, tokens, longest = count + 1, tokens + nxt, max(longest, nxt)
    return count
