"""The lean loop's KV cache (`haldet.backends.hf.decode`): `GrowingLayer`, a transformers DynamicLayer whose keys
and values live in preallocated buffers written in place, the cache built of them (`growing_cache`; a model with
sliding-window or other layer kinds keeps its own), whether a model's rows can be merged (`mergeable`), and copies
of some rows and columns into buffers of their own (`copy_rows`, `rebuilt`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import torch


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


def all_growing(cache: Any) -> bool:
    """Whether every layer of the cache is a `GrowingLayer` (full attention, preallocated)."""
    return all(isinstance(layer, _layer_class()) for layer in cache.layers)


def mergeable(config: Any) -> bool:
    """Whether a model with this config gets a cache of `GrowingLayer`s (full attention only), whose rows can be
    merged across prompts at different widths and padded in the middle (a shared prefix, a head before tails)."""
    return all_growing(growing_cache(config, 1))


def copy_rows(cache: Any, index: torch.Tensor | None, width: int, room: int) -> Any:
    """A cache of `GrowingLayer`s of its own (writes to it do not reach `cache`): rows `index` (all: None) of
    `cache`'s first `width` columns, with `room` free positions after them."""
    return rebuilt(cache, lambda filled: (filled if index is None else filled[index])[:, :, :width], room)


def rebuilt(cache: Any, take: Callable[[torch.Tensor], torch.Tensor], room: int, *, one_block: bool = False) -> Any:
    """A copy of `cache` whose every layer holds `take(keys)` and `take(values)` ([rows, heads, columns, dim]) in
    buffers of its own, with `room` free positions after them. `one_block`: every buffer a view of one allocation
    (layers of one shape), freed whole once no layer holds it: a long-kept copy of a few rows then leaves no heap
    of small freed pieces behind (`prompt_states`)."""
    copied = copy.copy(cache)
    copied.layers = []
    block: torch.Tensor | None = None
    for li, layer in enumerate(cache.layers):
        new = copy.copy(layer)
        buffers = []
        for vi, filled in enumerate((layer.keys, layer.values)):
            rows = take(filled)
            shape = (*rows.shape[:2], rows.shape[2] + room, rows.shape[3])
            if one_block and block is None:
                block = rows.new_empty((len(cache.layers), 2, *shape))
            buffer = block[li, vi] if block is not None and block.shape[2:] == shape else rows.new_empty(shape)
            buffer[:, :, : rows.shape[2]] = rows
            buffers.append(buffer)
        new.adopt(buffers[0], buffers[1], buffers[0].shape[2] - room)
        copied.layers.append(new)
    return copied
