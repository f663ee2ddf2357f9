"""How many rows the lean loop's decoding pool may hold: the memory its KV cache (and, for ICR, every layer's state
of each token) may take, on CPU a fixed budget, on a CUDA card a share of its free memory."""

from __future__ import annotations

from typing import Any

# the most memory the decoding pool's KV cache may take (rows are capped to fit; a merge briefly holds two copies,
# so the decoding peak is about the model plus twice this: with 1.5 GiB the default run fits in 8 GB, docs/speed.md)
KV_POOL_BYTES = 3 << 29
# on a CUDA device the pool may also take this share of the memory free when it is sized, where that is more (a
# merge briefly holds two copies: half the free memory at most); the CPU figure fits an 8 GB machine, but holds an
# 8B model (131 KB a token) to about 53 of 96 rows for HaluEval-QA's prompts on a 141 GB card (docs/speed.md)
CUDA_FREE_SHARE = 0.25


def kv_pool_budget(device: Any) -> int:
    """The bytes the decoding pool's KV cache may take on `device` (a torch.device): `KV_POOL_BYTES`, or on CUDA a
    quarter of the memory free now when that is more (free on the card plus what torch's caching allocator holds
    unused: an earlier pool's freed cache is free for the next one)."""
    if getattr(device, "type", "cpu") != "cuda":
        return KV_POOL_BYTES
    import torch

    free, _total = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return max(KV_POOL_BYTES, int(free * CUDA_FREE_SHARE))


def rows_within_budget(config: Any, itemsize: int, longest: int, max_new_tokens: int, *, states: bool,
                       most: int, device: Any) -> int:
    """`most` rows, fewer when their KV cache (every layer's keys and values for the `longest` prompt plus the
    answer; with `states`, also every layer's float32 hidden state of each token, which the ICR features read)
    would pass the pool's budget on `device` (`kv_pool_budget`: a larger model, long prompts). `config`: the text
    model's config; `itemsize`: bytes of one weight (the cache's dtype)."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * heads * head_dim * itemsize
    if states:
        per_token += (config.num_hidden_layers + 1) * config.hidden_size * 4
    return max(1, min(most, kv_pool_budget(device) // (per_token * (longest + max_new_tokens))))
