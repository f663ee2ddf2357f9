"""The `trace_answer` stage (RACE's alignment with the target model as the proxy): each sampled answer's mean token
entropy read after the prompt and the primary output's reasoning, equal to the entropies of one plain forward pass
over that sequence computed here; RACE reads it through the loader. Model: the tiny reasoning model
(tests/tiny_thinking.py)."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.backends.select import make_backend
from haldet.config import RunConfig
from haldet.detectors.base import DETECTORS
from haldet.schema import Instance
from haldet.signals import Signal, SignalView
from haldet.stages.base import CellContext, Item
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader, ensure_stages
from haldet.stages.trace_answer import NO_TRACE
from haldet.store import CellStore
from tiny_thinking import build_tiny_thinking


def _entropy_after(backend, context: list[int], answer: list[int]) -> float:
    """Mean next-token entropy (nats) over the answer's positions of one forward pass over context + answer."""
    import torch

    ids = context + answer
    with torch.no_grad():
        logp = torch.log_softmax(backend.model(torch.tensor([ids])).logits[0].double(), dim=-1)
    h = -(logp.exp() * logp).sum(-1).numpy()
    return float(h[len(context) - 1 : len(ids) - 1].mean())


def test_sampled_answers_read_after_the_primary_trace(tmp_path) -> None:
    model = build_tiny_thinking(tmp_path / "m")
    cfg = RunConfig.model_validate({"device": "cpu", "generation": {"max_new_tokens": 16},
                                    "sample": {"k": 3, "max_new_tokens": 16, "temperature": 1.0, "top_p": 1.0}})
    backend = make_backend(str(model), cfg)
    inst = Instance(id="toy/test/0", dataset="toy", scenario="qa_open", task_type="short_answer",
                    question="what is the capital of australia ?", references=["canberra"])
    items = [Item(instance=inst, prompt=backend.render_chat([{"role": "user", "content": inst.question}]))]
    ctx = CellContext(config=cfg, dataset="toy", model=str(model), store=CellStore(tmp_path / "cell"),
                      backend_factory=lambda: backend)
    attach_generations(items, GenerateStage(ctx).ensure(items))
    recs = ensure_stages(ctx, items, ["sample", "trace_answer"])
    gen, samples = items[0].generation, recs["sample"]["toy/test/0"]["samples"]
    got = recs["trace_answer"]["toy/test/0"]["entropies"]
    assert gen.reasoning and len(got) == 3 and any(s.strip() for s in samples)
    context = backend.encode_prompt(items[0].prompt) + list(gen.reasoning_ids)
    for text, value in zip(samples, got, strict=True):
        if not text.strip():
            assert value is None  # a sample without an answer: NaN for the detector
        else:
            assert value == pytest.approx(_entropy_after(backend, context, backend.encode_response(text)[0]),
                                          abs=1e-4)
    view = SignalView(ids=["toy/test/0"], instances=[inst], generations=[gen], loader=EvidenceLoader(ctx, items))
    entropies = view.get(Signal.TRACE_ANSWER_ENTROPIES)[0]
    expected = np.nanmean([np.nan if v is None else v for v in got])
    assert DETECTORS.get("race")(variant="ca").score(view).values[0] == pytest.approx(expected)
    assert np.isnan(entropies).sum() == sum(v is None for v in got)
    # an output without a reasoning trace has nothing to read the samples after
    no_trace = items[0].generation.model_copy(update={"reasoning": None, "reasoning_ids": []})
    from haldet.stages.trace_answer import TraceAnswerStage

    rec = TraceAnswerStage(ctx).compute([Item(instance=inst, prompt=items[0].prompt, generation=no_trace)])[0]
    assert rec["invalid"] == NO_TRACE and rec["entropies"] is None
