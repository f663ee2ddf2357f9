"""`HFBackend`'s calls through haldet's own decoding loop (`decoder="haldet"`, the default): greedy answers,
seeded samples, a verdict word's candidate log-probs, two questions sharing a head, and answers read for their
evidence while they are decoded. Each takes the backend as an argument; the loop itself is
`haldet.backends.hf.decode`, and `haldet.backends.hf.reference` holds the transformers-`generate` counterparts."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from haldet.backends.base import AnswerEvidence, EvidenceRequest, GenOutput
from haldet.backends.hf.loading import DecodingModel
from haldet.backends.hf.padding import padded_group
from haldet.backends.hf.sampling import row_seed, sampler_class
from haldet.backends.hf.states import layer_index


def generate_until(backend: DecodingModel, prompts: list[str], until: Callable[[str], bool] | None, *,
                   max_new_tokens: int, batch_size: int, progress: Any = None) -> list[GenOutput]:
    """`HFBackend.generate_until` through the lean loop."""
    import torch

    from haldet.backends.hf.decode import decode  # lazy: torch

    encoded = [backend.encode_prompt(p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    results: list[GenOutput | None] = [None] * len(prompts)
    with torch.inference_mode():
        out = decode(backend.model, [encoded[i] for i in order], max_new_tokens=max_new_tokens,
                     stop_ids=sorted(backend.stop_ids), pad_id=backend.tokenizer.pad_token_id,
                     row_done=backend.until_done(until) if until is not None else None,
                     prefill_batch=batch_size, pool_rows=backend.pool_rows(encoded, max_new_tokens),
                     on_prompt_done=(lambda _: progress(1)) if progress is not None else None,
                     keep_into=backend.prompt_states if backend.keeping else None)
    for row, item in enumerate(order):
        results[item] = backend.finish_until(out.tokens[row], out.logprobs[row], until)
    return [r for r in results if r is not None]


def sample(backend: DecodingModel, prompts: list[str], *, k: int, temperature: float, top_p: float,
           seeds: Sequence[int], max_new_tokens: int, batch_size: int, progress: Any = None,
           hidden: tuple[int, str] | None = None) -> list[list[GenOutput]]:
    """`HFBackend.sample` through the lean loop."""
    import torch

    from haldet.backends.hf.decode import decode  # lazy: torch

    encoded = [backend.encode_prompt(p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    results: list[list[GenOutput] | None] = [None] * len(prompts)
    # row i * k + j is sample j of prompt order[i]; each row draws from its own seeded generator
    sampler = sampler_class()([row_seed(seeds[i], j) for i in order for j in range(k)], temperature, top_p,
                               backend.device)
    with torch.inference_mode():
        # the K rows of a prompt share its prefill; log-probs are the model's own (raw logits, temperature 1)
        out = decode(backend.model, [encoded[i] for i in order], max_new_tokens=max_new_tokens,
                     stop_ids=sorted(backend.stop_ids), pad_id=backend.tokenizer.pad_token_id, choose=sampler.draw,
                     repeat=k, prefill_batch=max(1, batch_size // k),
                     pool_rows=max(backend.pool_rows(encoded, max_new_tokens), k),
                     on_prompt_done=(lambda _: progress(1)) if progress is not None else None,
                     hidden_layer=layer_index(hidden[0], backend.layer_count() + 1) if hidden else None,
                     hidden_pooling=hidden[1] if hidden else "mean", take_from=backend.prompt_states)
    for pos, item in enumerate(order):
        rows = range(pos * k, (pos + 1) * k)
        outs = [backend.finish(out.tokens[r], out.logprobs[r]) for r in rows]
        for r, o in zip(rows, outs, strict=True):
            o.extra["sanitised_logits"] = sampler.sanitised_rows[r]
            if out.states is not None:
                o.extra["hidden"] = out.states[r].cpu().numpy()
        results[item] = outs
    return [r for r in results if r is not None]


def candidate_logprobs(backend: DecodingModel, prompts: list[str], candidates: Sequence[int], *, max_new_tokens: int,
                       batch_size: int, progress: Any = None) -> list[GenOutput]:
    """`HFBackend.candidate_logprobs` through the lean loop."""
    import torch

    from haldet.backends.hf.pool import prefill  # lazy: torch

    encoded = [backend.encode_prompt(p) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    results: list[GenOutput | None] = [None] * len(prompts)
    wanted = list(candidates)
    in_order = [encoded[i] for i in order]
    start = 0
    while start < len(order):
        batch = order[start : start + padded_group(in_order, start, batch_size)]
        start += len(batch)
        seqs = [encoded[i] for i in batch]
        with torch.inference_mode():
            state = prefill(backend.model, seqs, capacity=max(len(s) for s in seqs),
                            pad_id=backend.tokenizer.pad_token_id)
            logp = torch.log_softmax(state.logits, dim=-1)
            first = logp.argmax(dim=-1)
        for row, item in enumerate(batch):
            token = int(first[row])
            res = backend.finish([token], [float(logp[row, token])])
            res.extra["candidate_logprobs"] = [float(x) for x in logp[row, wanted]]
            results[item] = res
        if progress is not None:
            progress(len(batch))
    return [r for r in results if r is not None]


def generate_with_evidence(backend: DecodingModel, prompts: list[str], request: EvidenceRequest, *,
                           max_new_tokens: int, batch_size: int, progress: Any = None
                           ) -> tuple[list[GenOutput], list[AnswerEvidence] | None]:
    """`HFBackend.generate_with_evidence` through the lean loop."""
    import torch

    from haldet.backends.hf.answer_reader import AnswerReader, reading_attention  # lazy: torch
    from haldet.backends.hf.decode import decode  # lazy: torch

    encoded = [backend.encode_prompt(p) for p in prompts]
    rows = backend.pool_rows(encoded, max_new_tokens, states=request.icr)
    reader = AnswerReader(backend.model, request, stop_ids=sorted(backend.stop_ids), head=backend.head_logits,
                          text=backend.answer_text, pool_rows=rows)
    if max(len(e) for e in encoded) + max_new_tokens + reader.room > backend.window():
        return backend.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                progress=progress), None
    order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
    with torch.inference_mode(), reading_attention(backend.model) if request.icr or request.prev_attention \
            else contextlib.nullcontext():
        out = decode(backend.model, [encoded[i] for i in order], max_new_tokens=max_new_tokens,
                     stop_ids=sorted(backend.stop_ids), pad_id=backend.tokenizer.pad_token_id, prefill_batch=batch_size,
                     pool_rows=rows, on_prompt_done=(lambda _: progress(1)) if progress is not None else None,
                     reader=reader, keep_into=backend.prompt_states if backend.keeping else None)
        reader.flush()
    answers: list[GenOutput | None] = [None] * len(prompts)
    evidence: list[AnswerEvidence | None] = [None] * len(prompts)
    for row, item in enumerate(order):
        answers[item] = answer = backend.finish(out.tokens[row], out.logprobs[row])
        evidence[item] = found = reader.evidence[row]
        found.output.token_logprobs = (np.asarray(answer.token_logprobs, dtype=np.float64)
                                       if answer.token_ids else None)
        found.seconds = {stage: total / len(prompts) for stage, total in reader.seconds.items()}
    return [a for a in answers if a is not None], [e for e in evidence if e is not None]


def paired_replies(backend: DecodingModel, first: list[str], second: list[str], until: Callable[[str], bool], *,
                   candidates: Sequence[int], max_new_tokens: int,
                   batch_size: int) -> tuple[list[GenOutput], list[GenOutput]]:
    """`HFBackend.paired_replies` through the lean loop."""
    import torch

    from haldet.backends.hf.decode import decode  # lazy: torch
    from haldet.backends.hf.pool import common_prefix  # lazy: torch

    pairs = [(backend.encode_prompt(a), backend.encode_prompt(b)) for a, b in zip(first, second, strict=True)]
    shared = [common_prefix(pair) for pair in pairs]
    order = sorted(range(len(pairs)), key=lambda i: shared[i])
    wanted = list(candidates)
    first_logp: dict[int, Any] = {}

    def on_first(rows: Any, logits: Any) -> None:  # row 2p + 1 asks item order[p] the second question
        for row, logp in zip(rows.tolist(), torch.log_softmax(logits, dim=-1), strict=True):
            if row % 2:
                first_logp[row] = logp[wanted]

    answer_done = backend.until_done(until)

    def row_done(row: int, tokens: list[int]) -> bool:  # the second question's row: its first token only
        return bool(row % 2) or answer_done(row, tokens)

    with torch.inference_mode():
        out = decode(backend.model, [pairs[i][0][: shared[i]] for i in order], max_new_tokens=max_new_tokens,
                     stop_ids=sorted(backend.stop_ids), pad_id=backend.tokenizer.pad_token_id, repeat=2,
                     tails=[[pairs[i][0][shared[i]:], pairs[i][1][shared[i]:]] for i in order],
                     row_done=row_done, on_first=on_first, prefill_batch=batch_size,
                     pool_rows=backend.pool_rows([p for pair in pairs for p in pair], max_new_tokens))
    answers: list[GenOutput | None] = [None] * len(pairs)
    verdicts: list[GenOutput | None] = [None] * len(pairs)
    for pos, item in enumerate(order):
        answers[item] = backend.finish_until(out.tokens[2 * pos], out.logprobs[2 * pos], until)
        verdict = backend.finish(out.tokens[2 * pos + 1][:1], out.logprobs[2 * pos + 1][:1])
        verdict.extra["candidate_logprobs"] = [float(x) for x in first_logp[2 * pos + 1]]
        verdicts[item] = verdict
    return [a for a in answers if a is not None], [v for v in verdicts if v is not None]
