"""Given responses read once (`HFBackend.read_given`): the token evidence and the pooled hidden states of the
answer from ONE teacher-forced pass, batched by a token budget, each layer pooled as it is computed.

Before, a response that ships with the data went through the token pass (log-probs, entropies, top-k) and then
the features pass (pooled states), and the features pass asked the model for every layer's hidden states at every
position of a whole batch before pooling: memory grew with items x length x layers x width. Here forward hooks on
the decoder layers pool each layer's output for every row as soon as the layer returns it, so only one layer's
states of one batch are alive at a time, and rows are grouped so that rows x padded width stays within the token
budget (a single row longer than the budget runs alone). The output head reads the final states in chunks of
positions, so the [T, vocab] log-softmax is never held whole. The values are the ones the two passes give (same
tensors, same reductions; tests/stages/test_given_pass.py).

Parts that need every position of every layer at once or eager attention (ICR features, statement branches, token
attention, LLM-Check's layers) still go through the two passes (`tokens.token_pass`, then `forward.forward`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from haldet.backends.base import EvidenceRequest, ForwardOutput, ForwardRequest, TokenOutput, TokenRequest
from haldet.backends.hf import tokens
from haldet.backends.hf.distribution import chernoff_terms
from haldet.backends.hf.forward import forward as forward_pass
from haldet.backends.hf.loading import LoadedModel
from haldet.backends.hf.states import layer_index, pool_states

# answer positions whose [chunk, vocab] log-softmax is held at once (49K vocab x 256 x 4 bytes = 50 MB; chunks give
# bitwise the same log-probs as the whole span on CPU)
HEAD_CHUNK = 256


def fits_one_pass(evidence: EvidenceRequest | None, *, attention: bool, layers: bool) -> bool:
    """Whether the single pooled pass gives everything asked (no eager attention, no all-position states;
    `attention` covers every attention part)."""
    return not (attention or layers or (evidence is not None and (evidence.icr or evidence.statements)))


def budget_batches(widths: Sequence[int], *, batch_size: int, token_budget: int) -> list[list[int]]:
    """Consecutive index groups of rows sorted by width: at most `batch_size` rows, rows x widest row within
    `token_budget` (a row wider than the budget alone)."""
    groups: list[list[int]] = []
    for i, width in enumerate(widths):
        if groups and len(groups[-1]) < batch_size and (len(groups[-1]) + 1) * width <= token_budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def decoder_layers(backend: LoadedModel) -> list[Any] | None:
    """The decoder layers in order (the module list with one entry per transformer layer), None if not found."""
    import torch

    want = backend.layer_count()
    for _, module in backend.model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == want and want > 0:
            return list(module)
    return None


def read_given(backend: LoadedModel, requests: list[TokenRequest], evidence: EvidenceRequest | None, *,
               top_k: int, entropies: bool, attention: bool, layers: bool, batch_size: int, token_budget: int,
               progress: Any = None, prev_attention: bool = False
               ) -> tuple[list[TokenOutput], list[ForwardOutput] | None]:
    """Token evidence of each request and, when `evidence` is given, its answer span's pooled states (as
    `forward` with `logprobs=True` gives them; None without `evidence`). One pass where `fits_one_pass`."""
    found = decoder_layers(backend)
    if found is None or not fits_one_pass(evidence, attention=attention or prev_attention, layers=layers):
        outs = tokens.token_pass(backend, requests, top_k=top_k, entropies=entropies, attention=attention,
                                 batch_size=batch_size, progress=progress, layers=layers,
                                 prev_attention=prev_attention)
        if evidence is None:
            return outs, None
        fwd = [ForwardRequest(ids=list(r.prompt_ids) + list(r.answer_ids), start=len(r.prompt_ids), key=r.key,
                              branches=evidence.statements) for r in requests]
        return outs, forward_pass(backend, fwd, layers=evidence.layers, poolings=evidence.poolings, logprobs=True,
                                  icr=evidence.icr, batch_size=batch_size)
    return _one_pass(backend, found, requests, evidence, top_k=top_k, entropies=entropies or evidence is not None,
                     batch_size=batch_size, token_budget=token_budget, progress=progress)


def _one_pass(backend: LoadedModel, decoder: list[Any], requests: list[TokenRequest],
              evidence: EvidenceRequest | None, *, top_k: int, entropies: bool, batch_size: int, token_budget: int,
              progress: Any) -> tuple[list[TokenOutput], list[ForwardOutput] | None]:
    import torch

    n_states = len(decoder) + 1
    wanted = [layer_index(x, n_states) for x in evidence.layers] if evidence else []  # in the requested order
    chosen = set(wanted)
    poolings = list(evidence.poolings) if evidence else []
    window = backend.window()
    token_out: list[TokenOutput | None] = [None] * len(requests)
    fwd_out: list[ForwardOutput | None] = [None] * len(requests)
    rows: list[tuple[int, list[int], int, dict[str, Any] | None]] = []  # (index, ids, answer start, window info)
    for i, req in enumerate(requests):
        if not req.answer_ids:
            token_out[i] = TokenOutput(key=req.key, token_logprobs=np.zeros(0), window=None)
            fwd_out[i] = ForwardOutput(key=req.key, n_tokens=len(req.prompt_ids))
            continue
        if not req.prompt_ids:
            raise ValueError(f"request {req.key}: the answer needs at least one prompt token before it")
        ids, start, info = tokens.fit_to_window(req, window)
        if not ids:
            token_out[i] = TokenOutput(key=req.key, window=info)
            fwd_out[i] = ForwardOutput(key=req.key, n_tokens=len(req.prompt_ids) + len(req.answer_ids), window=info)
            continue
        rows.append((i, ids, start, info))
    rows.sort(key=lambda r: len(r[1]))
    batch: list[tuple[int, list[int], int, dict[str, Any] | None]] = []
    pooled: dict[int, dict[str, dict[int, np.ndarray]]] = {}  # row in batch -> pooling -> state index -> [D]

    def pool(state_index: int, hidden: Any) -> None:
        if state_index not in chosen:
            return
        for row, (_, ids, start, _) in enumerate(batch):
            for name in poolings:  # the features pass's own reduction, on this one layer
                pooled[row][name][state_index] = pool_states([hidden], [0], row, start, len(ids), name)[0]

    def before_first(module: Any, args: Any, kwargs: Any) -> None:
        pool(0, args[0] if args else kwargs["hidden_states"])

    def after(index: int) -> Any:
        def hook(module: Any, args: Any, out: Any) -> None:
            pool(index + 1, out[0] if isinstance(out, tuple) else out)
        return hook

    last_state = n_states - 1  # the final state is the normed one the model returns, not the last layer's output
    handles = [decoder[0].register_forward_pre_hook(before_first, with_kwargs=True)] if 0 in chosen else []
    handles += [decoder[i].register_forward_hook(after(i)) for i in range(len(decoder) - 1) if i + 1 in chosen]
    base = backend.model.base_model
    device = backend.model.get_input_embeddings().weight.device
    widths = [len(r[1]) for r in rows]
    try:
        for group in budget_batches(widths, batch_size=max(1, batch_size), token_budget=max(1, token_budget)):
            batch[:] = [rows[g] for g in group]
            pooled.clear()
            pooled.update({row: {name: {} for name in poolings} for row in range(len(batch))})
            ids_t, mask = tokens.right_padded([r[1] for r in batch], backend.tokenizer.pad_token_id)
            with torch.inference_mode():
                last = base(input_ids=ids_t.to(device), attention_mask=mask.to(device), use_cache=False,
                            output_hidden_states=False).last_hidden_state
                pool(last_state, last)
                for row, (index, ids, start, info) in enumerate(batch):
                    key = requests[index].key
                    lp, ent, k_ids, k_lp, chern = _answer_stats(backend, last[row], ids, start, top_k, entropies)
                    token_out[index] = TokenOutput(key=key, token_logprobs=lp, entropies=ent, topk_ids=k_ids,
                                                   topk_logprobs=k_lp, window=info)
                    res = ForwardOutput(key=key, n_tokens=len(ids), window=info, token_logprobs=lp,
                                        token_entropies=ent, token_chernoff=chern)
                    for name in poolings:
                        by_state = pooled[row][name]
                        res.pooled[name] = np.stack([by_state[s] for s in wanted]).astype(np.float32)
                    fwd_out[index] = res
            if progress is not None:
                progress(len(batch))
    finally:
        for handle in handles:
            handle.remove()
    toks = [o for o in token_out if o is not None]
    return toks, ([o for o in fwd_out if o is not None] if evidence is not None else None)


def _answer_stats(backend: LoadedModel, last_row: Any, ids: list[int], start: int, top_k: int,
                  entropies: bool) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None,
                                            np.ndarray | None]:
    """Log-prob (and entropy with the log Chernoff coefficients to uniform, top-k with the observed token first) of
    each answer token, `HEAD_CHUNK` positions of the output head at a time."""
    import torch

    lps, ents, chern, kids, klps = [], [], [], [], []
    for a in range(start, len(ids), HEAD_CHUNK):
        b = min(len(ids), a + HEAD_CHUNK)
        logp = backend.answer_log_softmax(last_row, ids[:b], a)  # positions a - 1 .. b - 2 predict ids[a:b]
        observed = torch.tensor(ids[a:b], dtype=torch.long, device=logp.device)
        lps.append(logp.gather(-1, observed[:, None]).squeeze(-1).double().cpu().numpy())
        if entropies:
            ents.append((-(logp.exp() * logp).nan_to_num().sum(-1)).double().cpu().numpy())
            chern.append(chernoff_terms(logp).cpu().numpy())
        if top_k > 0:
            k_ids, k_lp = tokens.topk_with_observed(logp, observed, min(top_k, logp.shape[-1]))
            kids.append(k_ids.cpu().numpy().astype(np.int64))
            klps.append(k_lp.float().cpu().numpy())
    return (np.concatenate(lps), np.concatenate(ents) if entropies else None,
            np.concatenate(kids) if top_k > 0 else None, np.concatenate(klps) if top_k > 0 else None,
            np.concatenate(chern) if entropies else None)
