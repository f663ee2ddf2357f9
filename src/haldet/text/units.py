"""Units of a response given as strings: find their character offsets.

Sources such as HalluEntity list a response's entities in reading order as plain strings. Each is searched for in
the response from where the previous one ended (so repeated words map to the right occurrence); one that is not
found there is a miss: it has no offsets, is counted and reported by the adapter, and is never dropped silently.
"""

from __future__ import annotations

from collections.abc import Sequence


def align_sequential(text: str, pieces: Sequence[str]) -> list[tuple[int, int] | None]:
    """Offsets `[start, end)` of each piece in `text`, searched in order from the end of the last match;
    None for a piece that does not occur after that point (the search position then stays where it was)."""
    out: list[tuple[int, int] | None] = []
    cursor = 0
    for piece in pieces:
        needle = piece.strip()
        at = text.find(needle, cursor) if needle else -1
        if at < 0:
            out.append(None)
            continue
        out.append((at, at + len(needle)))
        cursor = at + len(needle)
    return out
