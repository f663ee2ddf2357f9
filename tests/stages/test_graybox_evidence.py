"""The evidence of the gray-box baselines of issue 43, computed by the real stages on a tiny Llama with the embedded
SmolLM2 tokenizer and checked against the model's own outputs: the log Chernoff coefficients read while decoding,
the per-head attention on the previous token from the token pass, and the answer's log-probabilities without its
prompt from the `unconditional` stage; then every new detector scores the items from the stored records."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from haldet.backends.hf.backend import HFBackend
from haldet.config import RunConfig
from haldet.detectors.base import DETECTORS
from haldet.schema import Instance
from haldet.signals import CHERNOFF_EXPONENTS, KL_EXPONENTS, Signal, SignalView
from haldet.stages.base import CellContext, Item
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader, ensure_stages, needed_stages
from haldet.store import CellStore

SIGNALS = frozenset({Signal.TOKEN_LOGPROBS, Signal.TOKEN_CHERNOFF, Signal.TOKEN_ENTROPIES, Signal.TOKEN_ATTN_PREV,
                     Signal.ANSWER_LM_LOGPROBS})


def test_stored_evidence_equals_the_models_own_numbers(tmp_path: Path, tiny_smol_llama: Path) -> None:
    backend = HFBackend(str(tiny_smol_llama), device="cpu")
    config = RunConfig.model_validate({"generation": {"max_new_tokens": 6}})
    ctx = CellContext(config=config, dataset="toy", model=str(tiny_smol_llama), store=CellStore(tmp_path),
                      backend_factory=lambda: backend, signals=SIGNALS)
    questions = ["What is the capital of France?", "Who wrote Hamlet?"]
    items = [Item(instance=Instance(id=f"toy/test/{i}", dataset="toy", scenario="qa_open", task_type="short_answer",
                                    question=q), prompt=backend.render_chat([{"role": "user", "content": q}]))
             for i, q in enumerate(questions)]
    attach_generations(items, GenerateStage(ctx).ensure(items))
    stages = needed_stages(SIGNALS)
    assert stages == ["features", "unconditional"]  # RAUQ's attention is read in generate's decoding
    records = ensure_stages(ctx, items, stages)
    assert {r["source"] for r in records["features"].values()} == {"decoding"}  # read while decoding
    loader = EvidenceLoader(ctx, items)
    ids = [item.id for item in items]
    chern, attn, uncond = (loader(s, ids) for s in (Signal.TOKEN_CHERNOFF, Signal.TOKEN_ATTN_PREV,
                                                    Signal.ANSWER_LM_LOGPROBS))
    model = backend.model
    assert backend.start_ids() == [backend.tokenizer.bos_token_id]
    for k, item in enumerate(items):
        answer = list(item.generation.token_ids)
        prompt = backend.encode_prompt(item.prompt)
        s, n = len(prompt), len(answer)
        before = model.config._attn_implementation
        model.set_attn_implementation("eager")
        try:
            with torch.inference_mode():
                out = model(input_ids=torch.tensor([prompt + answer]), output_attentions=True)
                alone = model(input_ids=torch.tensor([backend.start_ids() + answer])).logits[0].double()
        finally:
            model.set_attn_implementation(before)
        logp = torch.log_softmax(out.logits[0, s - 1 : s - 1 + n].double(), dim=-1)
        vocab = logp.shape[-1]
        want = np.stack([(torch.logsumexp(g * logp, -1) - (1 - g) * math.log(vocab)).numpy()
                         for g in CHERNOFF_EXPONENTS]
                        + [(torch.special.xlogy(q, q).sum(-1) + math.log(vocab)).numpy()
                           for q in (torch.softmax(g * logp, -1) for g in KL_EXPONENTS)], axis=1)
        assert chern[k].shape == (n, 5) and np.allclose(chern[k], want, atol=1e-4)
        # the step that chooses answer token t has its query at position s + t - 1; its weight on that same key
        diag = torch.stack([a[0].diagonal(dim1=-2, dim2=-1)[:, s - 1 : s - 1 + n] for a in out.attentions])
        assert attn[k].shape == (model.config.num_hidden_layers, model.config.num_attention_heads, n)
        # read while decoding (tests/stages/test_tokens_in_decoding.py): column 0, the prompt's last query, is not kept
        assert np.allclose(attn[k][..., 1:], diag.numpy()[..., 1:], atol=2e-3) and np.isnan(attn[k][..., 0]).all()
        lm = torch.log_softmax(alone[:n], -1).gather(-1, torch.tensor(answer)[:, None]).squeeze(-1).numpy()
        assert np.allclose(uncond[k], lm, atol=1e-4)
    view = SignalView(ids=ids, instances=[i.instance for i in items], generations=[i.generation for i in items],
                      loader=loader)
    for name in ("renyi_divergence", "fisher_rao", "pmi", "cpmi", "rauq"):
        scores = DETECTORS.get(name)().score(view)
        assert np.isfinite(scores.values).all(), (name, scores.reasons)


def test_the_prompt_free_pass_reads_as_many_answers_as_the_token_budget_holds(tmp_path: Path) -> None:
    from haldet.backends.base import TokenRequest
    from haldet.stages.unconditional import UnconditionalStage

    def rows(budget: int, batch_size: int) -> int:
        config = RunConfig.model_validate({"tokens": {"token_budget": budget, "batch_size": batch_size}})
        ctx = CellContext(config=config, dataset="toy", model="m", store=CellStore(tmp_path), signals=SIGNALS,
                          backend_factory=lambda: None)
        requests = [TokenRequest(prompt_ids=[1], answer_ids=[5] * n) for n in (9, 24, 3)]  # longest row: 25 tokens
        return UnconditionalStage(ctx).rows_per_pass(requests)

    assert rows(100, 2) == 4 and rows(4096, 4) == 163 and rows(10, 2) == 2 and rows(10, 1) == 1
