"""ReDeEP's two mechanistic scores from one eager-attention pass over prompt + answer (Sun et al., ICLR 2025).

- External context score of head (l, h): for each answer token t, the context tokens that head attends most
  (`top_ratio` of them) are pooled (mean of their last-layer hidden states) and compared with token t's last-layer
  hidden state by cosine similarity; averaged over the answer tokens. Low = the head's copied context is not what
  the model carried forward.
- Parametric knowledge score of layer l: the Jensen-Shannon divergence between the logit-lens distributions
  (final norm, then the output head) of the residual stream before and after the layer's feed-forward update,
  averaged over the answer tokens. High = the feed-forward layer injected its own knowledge.

This is the token-level definition of the paper (its chunk variant pools chunk embeddings instead). The pass holds
every layer's attention rows of the answer tokens over the context, so length is bounded by `max_tokens`: a longer
item is not processed and gets its reason instead.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from haldet.backends.hf.loading import attention_hooks
from haldet.errors import HaldetError


def context_token_range(backend: Any, prompt: str, prompt_ids: list[int], context: str) -> tuple[int, int] | str:
    """Token positions [a, b) of the context inside the prompt ids, from the tokenizer's character offsets; the
    reason as a string when the context is not in the prompt text."""
    if not context.strip():
        return "the item has no context"
    start = prompt.find(context)
    if start < 0:
        return "the context does not appear verbatim in the rendered prompt"
    end = start + len(context)
    enc = backend.tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    shift = len(prompt_ids) - len(offsets)  # a BOS the backend prepends
    if shift < 0 or list(enc["input_ids"]) != list(prompt_ids[shift:]):
        return "the prompt's tokens differ from its offset tokenisation"
    hit = [i + shift for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
    return (hit[0], hit[-1] + 1) if hit else "the context has no token in the prompt"


def _jsd(p_logits: Any, q_logits: Any) -> Any:
    """Jensen-Shannon divergence (nats) between the softmax distributions of two [T, V] logit rows."""
    import torch

    lp, lq = torch.log_softmax(p_logits, dim=-1), torch.log_softmax(q_logits, dim=-1)
    lm = torch.logsumexp(torch.stack([lp, lq]), dim=0) - math.log(2.0)
    return 0.5 * ((lp.exp() * (lp - lm)).sum(-1) + (lq.exp() * (lq - lm)).sum(-1))


def _final_norm(model: Any) -> Any:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    for name in ("norm", "final_layernorm", "ln_f"):
        if hasattr(decoder, name):
            return getattr(decoder, name)
    raise HaldetError(f"no final norm found in {type(model).__name__}", where="ReDeEP (redeep features)",
                      hint="ReDeEP's logit lens needs a decoder with a final norm (Llama, Mistral, Qwen, ...)")


def _layer_parts(backend: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """Each decoder layer with its attention and feed-forward modules, in order."""
    named = dict(backend.model.named_modules())
    attn_names = [n for n in named if n.endswith("self_attn")]
    layers = [named[n.rsplit(".", 1)[0]] for n in attn_names]
    mlps = [getattr(layer, "mlp", None) for layer in layers]
    if len(layers) != backend.layer_count() or any(m is None for m in mlps):
        raise HaldetError(f"cannot find {backend.layer_count()} decoder layers with self_attn and mlp",
                          where=f"model {backend.name}", hint="ReDeEP needs a Llama-style decoder")
    return layers, [named[n] for n in attn_names], mlps


def redeep_features(backend: Any, prompt: str, answer_ids: list[int], context: str, *, top_ratio: float,
                    max_tokens: int) -> np.ndarray | str:
    """[L, H + 1]: per layer, each head's external-context score, then the feed-forward parametric-knowledge
    score; or the reason the item cannot be processed."""
    import torch

    prompt_ids = backend.encode_prompt(prompt)
    n = len(prompt_ids) + len(answer_ids)
    if not answer_ids:
        return "empty answer"
    if n > max_tokens:
        return (f"{n} tokens exceed redeep.max_tokens = {max_tokens} (the pass holds every layer's attention, "
                f"quadratic in length)")
    span = context_token_range(backend, prompt, prompt_ids, context)
    if isinstance(span, str):
        return span
    c0, c1 = span
    start = len(prompt_ids)
    layers, _, mlps = _layer_parts(backend)
    weights: list[Any] = []
    residual: list[Any] = []
    ffn: list[Any] = []

    def keep_attention(module: Any, args: Any, output: Any) -> None:
        w = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        weights.append(None if w is None else w[0, :, start:n, c0:c1].float())

    hooks = [layer.register_forward_hook(lambda m, a, o: residual.append((o[0] if isinstance(o, tuple) else o)
                                                                          [0, start:n].float()))
             for layer in layers]
    hooks += [mlp.register_forward_hook(lambda m, a, o: ffn.append(o[0, start:n].float())) for mlp in mlps]
    try:
        ids = torch.tensor([prompt_ids + list(answer_ids)], device=backend.device)
        with torch.no_grad(), attention_hooks(backend, keep_attention):
            out = backend.model(input_ids=ids, output_hidden_states=True, use_cache=False)
    finally:
        for handle in hooks:
            handle.remove()
    if any(w is None for w in weights) or len(weights) != len(layers):
        raise HaldetError("the attention modules gave no weights", where=f"model {backend.name}",
                          hint="ReDeEP needs eager attention weights")
    with torch.no_grad():
        last = out.hidden_states[-1][0].float()              # final (normed) states, [n, D]
        answer = torch.nn.functional.normalize(last[start:n], dim=-1)
        ctx = last[c0:c1]
        k = max(1, math.ceil(top_ratio * (c1 - c0)))
        norm = _final_norm(backend.model)
        rows = []
        for w, post, update in zip(weights, residual, ffn, strict=True):
            top = w.topk(k, dim=-1).indices                   # [H, T, k] context positions per head and token
            pooled = torch.nn.functional.normalize(ctx[top].mean(dim=-2), dim=-1)  # [H, T, D]
            ecs = (pooled * answer.unsqueeze(0)).sum(-1).mean(-1)                  # [H]
            dtype = next(norm.parameters()).dtype
            lens = backend.head_logits(norm(torch.cat([post - update, post]).to(dtype))).float()  # one head call
            pks = _jsd(lens[: len(post)], lens[len(post):]).mean()
            rows.append(torch.cat([ecs, pks.reshape(1)]))
        return torch.stack(rows).cpu().numpy().astype(np.float32)
