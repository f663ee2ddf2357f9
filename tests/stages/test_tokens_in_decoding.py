"""The token pass's parts that a greedy decoding already computes (top-k log-probs, entropies, each step's attention on
its own position) are read while decoding when evidence is (`tokens.parts_in_decoding`): no second pass over
prompt + answer, and the same numbers as that pass within float tolerance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from haldet.backends.hf.backend import HFBackend
from haldet.config import RunConfig
from haldet.detectors.base import DETECTORS
from haldet.schema import Instance
from haldet.signals import Signal, SignalView
from haldet.stages.base import CellContext, Item
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader
from haldet.store import CellStore

SIGNALS = frozenset({Signal.TOKEN_LOGPROBS, Signal.TOKEN_TOPK_IDS, Signal.TOKEN_TOPK_LOGPROBS, Signal.TOKEN_ATTN_PREV,
                     Signal.ANSWER_ENTROPIES, Signal.TOKEN_OFFSETS})
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "Name a prime number.", "Is water wet?"]


def _read(tmp_path: Path, backend: HFBackend, fused: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    passes: list[int] = []
    real = HFBackend.token_pass
    monkeypatch.setattr(backend, "token_pass",
                        lambda requests, **kw: passes.append(len(requests)) or real(backend, requests, **kw))
    config = RunConfig.model_validate({"generation": {"max_new_tokens": 8}, "evidence_in_decoding": fused})
    ctx = CellContext(config=config, dataset="toy", model="tiny", store=CellStore(tmp_path / str(fused)),
                      backend_factory=lambda: backend, signals=SIGNALS)
    items = [Item(instance=Instance(id=f"toy/test/{i}", dataset="toy", scenario="qa_open", task_type="short_answer",
                                    question=q), prompt=backend.render_chat([{"role": "user", "content": q}]))
             for i, q in enumerate(QUESTIONS)]
    records = GenerateStage(ctx).ensure(items)
    attach_generations(items, records)
    loader = EvidenceLoader(ctx, items)
    ids = [item.id for item in items]
    view = SignalView(ids=ids, instances=[i.instance for i in items], generations=[i.generation for i in items],
                      loader=loader)
    return {"passes": passes, "keys": [records[i]["key"] for i in ids],
            "answers": [i.generation.token_ids for i in items],
            **{s.value: loader(s, ids) for s in SIGNALS - {Signal.TOKEN_LOGPROBS}},
            **{name: DETECTORS.get(name)().score(view).values for name in ("rauq", "topk_margin", "entropy")}}


def test_token_parts_read_while_decoding_equal_the_teacher_forced_pass(tmp_path, tiny_smol_llama, monkeypatch):
    backend = HFBackend(str(tiny_smol_llama), device="cpu", decode_rows=3)  # rows join and leave the pool
    fused, own = (_read(tmp_path, backend, flag, monkeypatch) for flag in (True, False))
    assert fused["passes"] == [] and own["passes"] == [len(QUESTIONS)]  # no second pass over prompt + answer
    assert fused["answers"] == own["answers"] and all(fused["answers"])
    assert all(a != b for a, b in zip(fused["keys"], own["keys"], strict=True))  # the key says where they came from
    for k in range(len(QUESTIONS)):
        n = len(fused["answers"][k])
        np.testing.assert_array_equal(fused["token_topk_ids"][k], own["token_topk_ids"][k])
        np.testing.assert_allclose(fused["token_topk_logprobs"][k], own["token_topk_logprobs"][k], atol=1e-4)
        np.testing.assert_allclose(fused["answer_entropies"][k], own["answer_entropies"][k], atol=1e-4)
        np.testing.assert_array_equal(fused["token_offsets"][k], own["token_offsets"][k])
        attn, want = fused["token_attn_prev"][k], own["token_attn_prev"][k]
        assert attn.shape == want.shape and attn.shape[-1] == n
        # column t (t >= 1): the query that chooses token t, on token t - 1's own position; column 0 (the prompt's
        # last query) is not kept while decoding, and RAUQ does not read it
        np.testing.assert_allclose(attn[..., 1:], want[..., 1:], rtol=2e-3, atol=1e-5)  # float16
        assert np.isnan(attn[..., 0]).all() and np.isfinite(want).all()
    for name in ("rauq", "topk_margin", "entropy"):
        assert np.isfinite(fused[name]).all()
        np.testing.assert_allclose(fused[name], own[name], rtol=1e-3, atol=1e-3)
