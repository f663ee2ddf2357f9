"""Given responses read once (`haldet.backends.hf.given`): the one pooled pass gives what the token pass and the
features pass gave apart, its batches stay within the token budget without asking for every layer's states, and
the generate stage stores the features records from it, so the features stage has nothing left to compute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from haldet.backends.base import EvidenceRequest, ForwardRequest, TokenRequest
from haldet.backends.hf import given
from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.given import budget_batches, fits_one_pass
from haldet.config import RunConfig
from haldet.schema import Instance
from haldet.signals import Signal
from haldet.stages.base import CellContext, Item
from haldet.stages.features import FeatureStage
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader
from haldet.store import CellStore

TEXTS = ["Ada Lovelace was an English mathematician born in 1815.", "Paris.",
         "The Eiffel Tower stands in Berlin; it was built in 1999 of glass and wood."]
POOLINGS = ["last", "mean", "slt", "tbg"]


@pytest.fixture(scope="module")
def backend() -> HFBackend:
    return HFBackend("smollm2-135m", device="cpu")


def test_budget_batches_by_hand() -> None:
    # widths sorted ascending; budget 20: [3, 4, 5] -> 3 x 5 = 15 fits, a 4th row of 6 would be 24
    assert budget_batches([3, 4, 5, 6, 6, 25, 30], batch_size=4, token_budget=20) == [[0, 1, 2], [3, 4], [5], [6]]
    assert budget_batches([2, 2, 2, 2, 2], batch_size=2, token_budget=100) == [[0, 1], [2, 3], [4]]
    assert fits_one_pass(EvidenceRequest(layers=[-1], poolings=["mean"]), attention=False, layers=False)
    assert not fits_one_pass(EvidenceRequest(layers=[-1], poolings=["mean"], icr=True), attention=False, layers=False)
    assert not fits_one_pass(None, attention=True, layers=False)


def test_one_pass_equals_the_token_pass_and_the_features_pass(backend: HFBackend, monkeypatch: Any) -> None:
    monkeypatch.setattr(given, "HEAD_CHUNK", 4)  # the output head read 4 positions at a time: chunk edges matter
    prompt = backend.encode_prompt("Tell me something.\n")
    requests = [TokenRequest(prompt, backend.encode_response(t)[0], f"k{i}") for i, t in enumerate(TEXTS)]
    requests.append(TokenRequest(prompt, [], "empty"))
    layers = [-1, 0, 5]
    shapes: list[tuple[int, int]] = []
    hook = backend.model.base_model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append((tuple(kwargs["input_ids"].shape),
                                                    kwargs.get("output_hidden_states"))), with_kwargs=True)
    try:  # a budget of 40 tokens: widths 7, 22, 27 run as three batches
        toks, fwd = backend.read_given(requests, EvidenceRequest(layers=layers, poolings=POOLINGS), top_k=5,
                                       entropies=True, attention=False, layers=False, batch_size=4, token_budget=40)
    finally:
        hook.remove()
    assert all(rows * width <= 40 or rows == 1 for (rows, width), _ in shapes) and len(shapes) == 3
    assert all(flag is False for _, flag in shapes)  # never every layer's states at once
    ref_t = backend.token_pass(requests, top_k=5, entropies=True, attention=False, batch_size=1)
    ref_f = backend.forward([ForwardRequest(ids=r.prompt_ids + r.answer_ids, start=len(r.prompt_ids), key=r.key)
                             for r in requests], layers=layers, poolings=POOLINGS, logprobs=True, icr=False,
                            batch_size=1)
    assert [o.key for o in toks] == [o.key for o in fwd] == [r.key for r in requests]
    for got, want in zip(toks[:3], ref_t[:3], strict=True):
        assert np.allclose(got.token_logprobs, want.token_logprobs, atol=1e-5)
        assert np.allclose(got.entropies, want.entropies, atol=1e-5)
        assert (got.topk_ids == want.topk_ids).all() and np.allclose(got.topk_logprobs, want.topk_logprobs, atol=1e-5)
    for got, want in zip(fwd[:3], ref_f[:3], strict=True):
        assert set(got.pooled) == set(POOLINGS) and got.n_tokens == want.n_tokens
        for name in POOLINGS:  # layer order as requested: -1 first, then 0 and 5
            assert got.pooled[name].shape == (3, backend.model.config.hidden_size)
            assert np.allclose(got.pooled[name], want.pooled[name], atol=1e-4), name
        assert np.allclose(got.token_logprobs, want.token_logprobs, atol=1e-5)
        assert np.allclose(got.token_chernoff, want.token_chernoff, atol=1e-5)  # chunked head = whole pass
    assert toks[3].token_logprobs.shape == (0,) and fwd[3].pooled == {}


def test_given_responses_store_the_features_records_from_the_same_pass(tmp_path: Path, backend: HFBackend,
                                                                      monkeypatch: Any) -> None:
    config = RunConfig.model_validate({"features": {"layers": [-1, 3]}})
    ctx = CellContext(config=config, dataset="toy", model="smollm2-135m", store=CellStore(tmp_path),
                      backend_factory=lambda: backend, signals=frozenset({Signal.TOKEN_LOGPROBS, Signal.HIDDEN_MEAN}))
    items = [Item(instance=Instance(id=f"toy/test/{i}", dataset="toy", scenario="qa_open", task_type="long_form",
                                    question="Say something.", response=text),
                  prompt="Say something.\n") for i, text in enumerate(TEXTS)]
    attach_generations(items, GenerateStage(ctx).ensure(items))
    stage = FeatureStage(ctx)
    records = stage.records(items)
    assert {rec["source"] for rec in records.values()} == {"given"} and len(records) == 3

    def no_second_pass(batch: list[Item]) -> list[dict[str, Any]]:
        raise AssertionError("the features stage ran its own pass")

    monkeypatch.setattr(stage, "compute", no_second_pass)
    stage.ensure(items)
    got = EvidenceLoader(ctx, items)(Signal.HIDDEN_MEAN, [item.id for item in items])
    for item, arr in zip(items, got, strict=True):
        prompt = backend.encode_prompt(item.prompt)
        ids = item.generation.token_ids
        want = backend.forward([ForwardRequest(ids=prompt + ids, start=len(prompt), key="x")], layers=[-1, 3],
                               poolings=["mean"], logprobs=False, icr=False, batch_size=1)[0].pooled["mean"]
        assert np.allclose(arr, want, rtol=2e-3, atol=2e-3)  # stored as float16
