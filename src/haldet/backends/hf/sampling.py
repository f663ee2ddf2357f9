"""Seeded sampling for the `hf` backend: each row draws from its own generator, so an item's samples do not
depend on which other items share its batch (`sampler_class`, `row_seed`), by inverse CDF over the top-p nucleus
(`nucleus_draw`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def row_seed(seed: int, j: int) -> int:
    """Seed of sample j of an item whose base seed is `seed` (stable across runs and batchings)."""
    return (int(seed) * 1_000_003 + j * 7_919 + 17) % (2**63 - 1)


def sampler_class() -> type:
    """`SeededSampler` subclasses transformers' LogitsProcessor, imported lazily (transformers is heavy)."""
    from transformers import LogitsProcessor

    class SeededSampler(LogitsProcessor):  # type: ignore[misc]
        """Sanitise non-finite logits, apply temperature and nucleus (top-p) filtering, and draw one token per row
        with that row's own generator. Returns scores that are -inf except at the drawn token, so the generate
        loop's own draw is forced to it: the randomness comes only from the per-row seeds."""

        def __init__(self, seeds: Sequence[int], temperature: float, top_p: float, device: Any) -> None:
            import torch

            self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
            self.temperature = temperature
            self.top_p = top_p
            self.sanitised = 0
            self.sanitised_rows = [0] * len(self.generators)

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            """As a transformers logits processor (all rows present): scores forced to the drawn tokens."""
            import torch

            chosen = self.draw(scores, torch.arange(scores.shape[0], device=scores.device))
            forced = torch.full_like(scores, float("-inf"))
            forced[torch.arange(len(chosen)), chosen] = 0.0
            return forced

        def draw(self, scores: Any, rows: Any) -> Any:
            """One token per row of `scores`; `rows` are the rows' original indices (whose generators draw)."""
            import torch

            logits = scores.float()
            # a finite sum means every logit is finite (an inf or NaN makes the sum inf or NaN): one reduction per
            # step instead of a mask of the whole [rows, vocab] array; only a non-finite sum looks closer
            bad = None if bool(torch.isfinite(logits.sum())) else ~torch.isfinite(logits)
            if bad is not None and bool(bad.any()):
                self.sanitised += int(bad.sum())
                for row, n in zip(rows.tolist(), bad.sum(dim=-1).tolist(), strict=True):
                    self.sanitised_rows[row] += int(n)
                logits = torch.nan_to_num(logits, nan=-1e4, posinf=1e4, neginf=-1e4)
            logits = logits.clamp(-1e4, 1e4)
            if self.temperature != 1.0:  # x / 1.0 is x: no pass over the array for it
                logits = logits / self.temperature
            probs = torch.softmax(logits, dim=-1)
            uniforms = torch.stack([torch.rand((), generator=self.generators[row], device=self.generators[row].device)
                                    for row in rows.tolist()])
            return nucleus_draw(probs, self.top_p, uniforms.to(probs.device))

    return SeededSampler


def nucleus_draw(probs: Any, top_p: float, uniforms: Any, head: int = 1024) -> Any:
    """One token per row from its top-p nucleus, renormalised, by inverse CDF with the row's uniform in [0, 1).

    The nucleus: in descending probability, the tokens whose strictly more likely tokens hold less than `top_p` of
    the mass (the most likely token always). A row's token is the first one, in that order, whose cumulative mass
    exceeds uniform x (nucleus mass). Rows whose `head` most likely tokens already hold `top_p` are read from a
    partial sort (`topk`); only the others sort the whole vocabulary; `top_p >= 1` needs no order at all. Per
    decoding step this costs a fraction of masking the vocabulary and calling `multinomial` row by row."""
    import torch

    if top_p >= 1.0:
        cum = probs.cumsum(dim=-1)
        pos = torch.searchsorted(cum, (uniforms * cum[:, -1])[:, None].contiguous(), right=True).squeeze(-1)
        return pos.clamp(max=probs.shape[-1] - 1)
    values, index = probs.topk(min(head, probs.shape[-1]), dim=-1)
    wide = values.sum(dim=-1) < top_p  # the head holds less than top_p: these rows need the full order
    chosen = torch.empty(probs.shape[0], dtype=torch.long, device=probs.device)
    narrow_rows, wide_rows = (~wide).nonzero().flatten(), wide.nonzero().flatten()
    if len(narrow_rows):
        chosen[narrow_rows] = _draw_sorted(values[narrow_rows], index[narrow_rows], top_p, uniforms[narrow_rows])
    if len(wide_rows):
        values, index = probs[wide_rows].sort(dim=-1, descending=True)
        chosen[wide_rows] = _draw_sorted(values, index, top_p, uniforms[wide_rows])
    return chosen


def _draw_sorted(values: Any, index: Any, top_p: float, uniforms: Any) -> Any:
    """`nucleus_draw` on probabilities already in descending order (`index`: their token ids)."""
    import torch

    cum = values.cumsum(dim=-1)
    kept = ((cum - values) < top_p).sum(dim=-1).clamp_min(1)  # the nucleus is a prefix of the order
    mass = cum.gather(-1, (kept - 1)[:, None]).squeeze(-1)
    pos = torch.searchsorted(cum, (uniforms * mass)[:, None].contiguous(), right=True).squeeze(-1)
    return index.gather(-1, torch.minimum(pos, kept - 1)[:, None]).squeeze(-1)
