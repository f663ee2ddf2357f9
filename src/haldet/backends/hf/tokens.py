"""Token-level evidence for the `hf` backend: one teacher-forced pass over prompt + answer ids per batch.

It gives, for each answer token, its log-probability, the entropy of the model's distribution there, the top-k
tokens with the observed token forced in at index 0, and (when asked) the attention between answer tokens reduced
to a max over layers and heads (Focus's propagation weights). Offsets map tokens to characters of the response, so
units (entities, sentences, claims) find their tokens by overlap. Kept apart from `backend` (generation) on
purpose: one concept per module, and the decoding loop changes independently of this pass. Takes the backend as a
`LoadedModel` argument, so it never imports `backend`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from haldet.backends.base import TokenOutput, TokenRequest
from haldet.backends.hf.loading import LoadedModel, attention_hooks
from haldet.backends.hf.padding import padded_group
from haldet.errors import HaldetError


def right_padded(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """Token ids padded on the right to the longest sequence, and the attention mask (1 = a real token)."""
    import torch

    width = max(len(ids) for ids in sequences)
    ids_t = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, ids in enumerate(sequences):
        ids_t[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[row, : len(ids)] = 1
    return ids_t, mask


def encode_response(backend: LoadedModel, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Ids and character offsets of a given response; needs a fast tokenizer (offset mapping)."""
    tok = backend.tokenizer
    if not getattr(tok, "is_fast", False):
        raise HaldetError(f"the tokenizer of {backend.name} is not a fast tokenizer, so token offsets are unknown",
                          where=f"model {backend.name}", hint="use a model whose tokenizer.json is available")
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc.input_ids), [(int(a), int(b)) for a, b in enc.offset_mapping]


def token_offsets(backend: LoadedModel, ids: Sequence[int], text: str) -> list[tuple[int, int]]:
    """Offsets of generated ids in their decoded answer text (decoded prefixes; the answer text was stripped, so
    offsets are shifted by the leading whitespace and clipped to the text)."""
    tok = backend.tokenizer
    full = str(tok.decode(list(ids), skip_special_tokens=True))
    lead = len(full) - len(full.lstrip())
    out = []
    prev = 0
    for i in range(len(ids)):
        end = len(str(tok.decode(list(ids[: i + 1]), skip_special_tokens=True)))
        a, b = max(0, prev - lead), max(0, end - lead)
        out.append((min(a, len(text)), min(b, len(text))))
        prev = end
    return out


def topk_with_observed(logp: Any, observed: Any, k: int) -> tuple[Any, Any]:
    """[T, k] ids and log-probs: the observed token at index 0, then the k - 1 most likely other tokens."""
    import torch

    top_lp, top_ids = torch.topk(logp, k, dim=-1)
    is_obs = top_ids == observed[:, None]
    # stable sort on "is the observed token": the other tokens keep their order and come first
    order = torch.sort(is_obs.to(torch.int8), dim=-1, stable=True).indices[:, : k - 1]
    rest_ids = torch.gather(top_ids, 1, order)
    rest_lp = torch.gather(top_lp, 1, order)
    obs_lp = logp.gather(-1, observed[:, None])
    return torch.cat([observed[:, None], rest_ids], dim=1), torch.cat([obs_lp, rest_lp], dim=1)


def fit_to_window(req: TokenRequest, window: int) -> tuple[list[int], int, dict[str, Any] | None]:
    """(ids, answer start, window info) of prompt + answer within `window` tokens: the prompt head dropped when the
    whole does not fit (the info says how many tokens), ids [] with a `skipped` info when the answer alone does not."""
    ids, start = list(req.prompt_ids) + list(req.answer_ids), len(req.prompt_ids)
    if len(ids) <= window:
        return ids, start, None
    if len(req.answer_ids) + 1 > window:
        return [], start, {"policy": "skipped", "tokens": len(ids), "window": window,
                           "reason": f"the answer alone ({len(req.answer_ids)} tokens) exceeds the model window "
                                     f"({window})"}
    drop = len(ids) - window
    return ids[drop:], start - drop, {"policy": "dropped_prompt_head", "tokens": len(ids), "window": window,
                                      "dropped_tokens": drop}


def token_pass(backend: LoadedModel, requests: list[TokenRequest], *, top_k: int, entropies: bool, attention: bool,
               batch_size: int, progress: Any = None, layers: bool = False,
               prev_attention: bool = False) -> list[TokenOutput]:
    import torch

    from haldet.backends.hf.llmcheck import unit_hidden_scores  # lazy: sklearn, scipy

    model = backend.model
    window = backend.window()
    outputs: list[TokenOutput | None] = [None] * len(requests)
    rows: list[tuple[int, list[int], int, dict[str, Any] | None]] = []  # (index, ids, answer start, window info)
    for i, req in enumerate(requests):
        if not req.answer_ids:
            outputs[i] = TokenOutput(key=req.key, token_logprobs=np.zeros(0), window=None)
            continue
        if not req.prompt_ids:
            raise ValueError(f"request {req.key}: the answer needs at least one prompt token before it")
        ids, start, info = fit_to_window(req, window)
        if not ids:
            outputs[i] = TokenOutput(key=req.key, window=info)
            continue
        rows.append((i, ids, start, info))
    rows.sort(key=lambda r: len(r[1]))
    captured: list[Any] = []  # running max over layers of the head-max attention, [B, S, S]
    diagonals: list[Any] = []  # `layers`: per layer, sum over heads of log A[t, t], [B, S]
    per_head: list[Any] = []  # `prev_attention`: per layer, every head's A[t, t], [B, H, S]

    def reduce(module: Any, args: Any, out: Any) -> None:
        if out[1] is None:
            raise HaldetError("this model did not expose attention weights", where=f"model {backend.name}",
                              hint="drop the detectors that read token attention (focus, llmcheck)")
        weights = out[1].float()
        if layers:
            diagonals.append(torch.diagonal(weights, dim1=-2, dim2=-1).clamp_min(1e-30).log().sum(dim=1))
        if prev_attention:
            per_head.append(torch.diagonal(weights, dim1=-2, dim2=-1))
        if not attention:
            return
        layer_max = weights.amax(dim=1)
        if captured:
            captured[0] = torch.maximum(captured[0], layer_max)
        else:
            captured.append(layer_max)

    with attention_hooks(backend, reduce if attention or layers or prev_attention else None):
        begin, sequences = 0, [r[1] for r in rows]
        while begin < len(rows):
            # at most `batch_size` rows, and no more once right-padding them to the longest would add over a quarter
            # of their own tokens (answers of 2 and 64 tokens in one pass would mostly compute padding)
            count = padded_group(sequences, begin, max(1, batch_size))
            batch = rows[begin : begin + count]
            begin += count
            ids_t, mask = right_padded([r[1] for r in batch], backend.tokenizer.pad_token_id)
            captured.clear()
            diagonals.clear()
            per_head.clear()
            with torch.inference_mode():
                out = model(input_ids=ids_t.to(backend.device), attention_mask=mask.to(backend.device),
                            output_hidden_states=True, use_cache=False, logits_to_keep=1)
                last = out.hidden_states[-1]
                for row, (index, ids, start, info) in enumerate(batch):
                    logp = backend.answer_log_softmax(last[row], ids, start)
                    observed = torch.tensor(ids[start:], dtype=torch.long, device=logp.device)
                    res = TokenOutput(key=requests[index].key, window=info)
                    res.token_logprobs = logp.gather(-1, observed[:, None]).squeeze(-1).double().cpu().numpy()
                    if entropies:
                        res.entropies = (-(logp.exp() * logp).nan_to_num().sum(-1)).double().cpu().numpy()
                    if top_k > 0:
                        k_ids, k_lp = topk_with_observed(logp, observed, min(top_k, logp.shape[-1]))
                        res.topk_ids = k_ids.cpu().numpy().astype(np.int64)
                        res.topk_logprobs = k_lp.float().cpu().numpy()
                    if attention:
                        att = captured[0][row, start : len(ids), start : len(ids)]
                        res.attention = torch.tril(att, diagonal=-1).cpu().numpy().astype(np.float32)
                    if prev_attention:  # the query that chooses answer token t is at position t - 1
                        res.attn_prev = torch.stack([d[row, :, start - 1 : len(ids) - 1] for d in per_head]
                                                    ).cpu().numpy().astype(np.float32)
                    if layers:
                        res.attn_logdiag = torch.stack([d[row, start : len(ids)] for d in diagonals]).cpu().numpy()
                        states = torch.stack([h[row, start : len(ids)] for h in out.hidden_states]).double()
                        res.span_hidden = unit_hidden_scores(states.cpu().numpy(), requests[index].spans)
                    outputs[index] = res
            if progress is not None:
                progress(len(batch))
    return [o for o in outputs if o is not None]
