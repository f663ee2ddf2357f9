"""The reference decoder of `HFBackend` (`decoder="transformers"`): transformers' `model.generate`, greedy with every
step's full logits kept, or sampling with haldet's seeded sampler as a logits processor. The lean loop
(`haldet.backends.hf.decode`) is checked against it; it takes the backend as an argument and is imported by it
only when chosen."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from haldet.backends.base import GenOutput
from haldet.backends.hf.loading import DecodingModel
from haldet.backends.hf.sampling import row_seed, sampler_class


def generate(backend: DecodingModel, prompts: list[str], *, max_new_tokens: int, batch_size: int,
             progress: Any = None, candidates: Sequence[int] | None = None) -> list[GenOutput]:
    """The reference path (`decoder="transformers"`): `model.generate` with every step's full logits kept."""
    import torch
    from transformers import GenerationConfig

    model = backend.model
    encoded = [backend.encode_prompt(p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    results: list[GenOutput | None] = [None] * len(prompts)
    config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, output_logits=True,
                              return_dict_in_generate=True, pad_token_id=backend.tokenizer.pad_token_id,
                              eos_token_id=sorted(backend.stop_ids))
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        input_ids, attention = left_pad(backend, [encoded[i] for i in batch])
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
        new_tokens = out.sequences[:, input_ids.shape[1]:]
        logits = torch.stack(out.logits, dim=1).float()  # [batch, steps, vocab]
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        first = torch.log_softmax(logits[:, 0], dim=-1)[:, list(candidates)] if candidates else None
        for row, item in enumerate(batch):
            res = backend.finish(new_tokens[row].tolist(), logprobs[row].tolist())
            if first is not None:
                res.extra["candidate_logprobs"] = [float(x) for x in first[row]]
            results[item] = res
        if progress is not None:
            progress(len(batch))
    return [r for r in results if r is not None]


def sample(backend: DecodingModel, prompts: list[str], *, k: int, temperature: float, top_p: float,
           seeds: Sequence[int], max_new_tokens: int, batch_size: int, progress: Any = None) -> list[list[GenOutput]]:
    """The reference path (`decoder="transformers"`): `model.generate` with the seeded sampler as a processor."""
    import torch
    from transformers import GenerationConfig, LogitsProcessorList

    from haldet.backends.hf.kv_cache import cache_arg  # lazy: torch

    model = backend.model
    encoded = [backend.encode_prompt(p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    results: list[list[GenOutput] | None] = [None] * len(prompts)
    # temperature/top-p are applied by the seeded sampler itself; the built-in warpers are switched off
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                              max_new_tokens=max_new_tokens, output_logits=True, return_dict_in_generate=True,
                              pad_token_id=backend.tokenizer.pad_token_id, eos_token_id=sorted(backend.stop_ids))
    per_call = max(1, batch_size // k)
    sampler_cls = sampler_class()
    for begin in range(0, len(order), per_call):
        batch = order[begin : begin + per_call]
        input_ids, attention = left_pad(backend, [encoded[i] for i in batch])
        row_seeds = [row_seed(seeds[i], j) for i in batch for j in range(k)]
        sampler = sampler_cls(row_seeds, temperature, top_p, backend.device)
        with torch.inference_mode():
            cache = prompt_cache(backend, input_ids, attention, k)
            out = model.generate(input_ids=input_ids.repeat_interleave(k, dim=0),
                                 attention_mask=attention.repeat_interleave(k, dim=0), **cache_arg(model, cache),
                                 generation_config=config, logits_processor=LogitsProcessorList([sampler]))
        new_tokens = out.sequences[:, input_ids.shape[1]:]
        # the model's own log-probs (raw logits, temperature 1): the sequence likelihood detectors want
        logits = torch.stack(out.logits, dim=1).float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        for pos, item in enumerate(batch):
            rows = range(pos * k, (pos + 1) * k)
            outs = [backend.finish(new_tokens[r].tolist(), logprobs[r].tolist()) for r in rows]
            for r, o in zip(rows, outs, strict=True):
                o.extra["sanitised_logits"] = sampler.sanitised_rows[r]
            results[item] = outs
        if progress is not None:
            progress(len(batch))
    return [r for r in results if r is not None]


def prompt_cache(backend: DecodingModel, input_ids: Any, attention: Any, k: int) -> Any:
    """KV cache of the left-padded prompts minus their last token, computed once and repeated for K rows each:
    the K samples of a prompt read it once (generate then starts at the last prompt token). Positions are the
    ones generate derives from the attention mask, so the continuation is the same as without the cache."""
    from transformers import DynamicCache

    from haldet.backends.hf.kv_cache import cache_arg  # lazy: torch

    if input_ids.shape[1] < 2:
        return None
    cache = DynamicCache(config=backend.model.config)
    head, mask = input_ids[:, :-1], attention[:, :-1]
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    backend.model(input_ids=head, attention_mask=mask, position_ids=positions, **cache_arg(backend.model, cache),
               use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(k)
    return cache


def left_pad(backend: DecodingModel, seqs: list[list[int]]) -> tuple[Any, Any]:
    import torch

    width = max(len(s) for s in seqs)
    pad = backend.tokenizer.pad_token_id
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq):] = 1
    return ids.to(backend.device), mask.to(backend.device)


def cut_until(backend: DecodingModel, out: GenOutput, until: Callable[[str], bool]) -> GenOutput:
    """A full greedy answer cut after its first token at which `until(text so far)` holds (the reference path)."""
    for n in range(1, len(out.token_ids) + 1):
        if until(backend.answer_text(out.token_ids[:n])):
            cut = backend.finish(out.token_ids[:n], out.token_logprobs[:n])
            cut.finish_reason = "stop"
            return cut
    return out
