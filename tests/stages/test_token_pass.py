"""The token pass: top-k with the observed token first, agreement with the teacher-forced features pass, reduced
attention, and token-level evidence for generated answers (offsets into the decoded answer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from haldet.backends.base import ForwardRequest, TokenRequest
from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.tokens import topk_with_observed
from haldet.config import RunConfig
from haldet.schema import Instance
from haldet.signals import Signal
from haldet.stages.base import CellContext, Item
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader
from haldet.store import CellStore


def test_topk_puts_the_observed_token_first_whether_or_not_it_is_among_the_best() -> None:
    logp = torch.log_softmax(torch.tensor([[0.0, 3.0, 2.0, 1.0, -1.0], [5.0, 1.0, 0.0, -1.0, -2.0]]), dim=-1)
    ids, lps = topk_with_observed(logp, torch.tensor([4, 0]), 3)
    assert ids.tolist() == [[4, 1, 2], [0, 1, 2]]  # row 0: observed outside the top 3; row 1: it is the top 1
    assert torch.allclose(lps, logp.gather(1, ids))


@pytest.fixture(scope="module")
def backend() -> HFBackend:
    return HFBackend("smollm2-135m", device="cpu")


def test_token_pass_agrees_with_the_features_pass(backend: HFBackend) -> None:
    prompt = backend.encode_prompt("Tell me a bio of Ada Lovelace.\n")
    answer, offsets = backend.encode_response("Ada Lovelace was an English mathematician born in 1815.")
    out = backend.token_pass([TokenRequest(prompt, answer, "a")], top_k=5, entropies=True, attention=True,
                             batch_size=1)[0]
    ref = backend.forward([ForwardRequest(ids=prompt + answer, start=len(prompt), key="a")], layers=[-1],
                          poolings=[], logprobs=True, icr=False, batch_size=1)[0]
    assert np.allclose(out.token_logprobs, ref.token_logprobs, atol=1e-4)
    assert np.allclose(out.entropies, ref.token_entropies, atol=1e-4)
    assert out.topk_ids.shape == (len(answer), 5) and (out.topk_ids[:, 0] == np.array(answer)).all()
    assert np.allclose(out.topk_logprobs[:, 0], out.token_logprobs, atol=1e-4)
    assert (np.diff(out.topk_logprobs[:, 1:], axis=1) <= 1e-6).all()  # alternatives in descending order
    att = out.attention
    assert att.shape == (len(answer), len(answer)) and np.allclose(np.triu(att), 0) and (att >= 0).all()
    assert (att[1:].max(axis=1) > 0).all() and att.max() <= 1.0
    assert "".join("Ada Lovelace was an English mathematician born in 1815."[a:b] for a, b in offsets) == \
        "Ada Lovelace was an English mathematician born in 1815."


def test_generated_answers_get_token_evidence_with_offsets(tmp_path: Path, backend: HFBackend) -> None:
    config = RunConfig.model_validate({"generation": {"max_new_tokens": 8}})
    ctx = CellContext(config=config, dataset="toy", model="smollm2-135m", store=CellStore(tmp_path),
                      backend_factory=lambda: backend,
                      signals=frozenset({Signal.TOKEN_OFFSETS, Signal.ANSWER_ENTROPIES}))
    inst = Instance(id="toy/test/0", dataset="toy", scenario="qa_open", task_type="short_answer",
                    question="What is the capital of France?")
    items = [Item(instance=inst, prompt=backend.render_chat([{"role": "user", "content": inst.question}]))]
    recs = GenerateStage(ctx).ensure(items)
    attach_generations(items, recs)
    gen = items[0].generation
    assert gen is not None and not gen.provided and recs[inst.id]["tokens"]["parts"] == ["entropies", "offsets"]
    offsets = EvidenceLoader(ctx, items)(Signal.TOKEN_OFFSETS, [inst.id])[0]
    assert offsets.shape == (gen.n_tokens, 2) and offsets[-1, 1] == len(gen.response)
    assert "".join(gen.response[a:b] for a, b in offsets).strip() == gen.response
    # without token signals the key is the plain generation's: earlier caches stay valid
    plain = CellContext(config=config, dataset="toy", model="smollm2-135m", store=CellStore(tmp_path),
                        backend_factory=lambda: backend, signals=frozenset({Signal.TOKEN_LOGPROBS}))
    from haldet.config import stage_key
    from haldet.util.limits import max_new_tokens

    assert GenerateStage(plain).key(items[0]) == stage_key("generate", backend.fingerprint(), items[0].prompt,
                                                           max_new_tokens(config, inst))
    assert GenerateStage(plain).key(items[0]) != GenerateStage(ctx).key(items[0])
