"""Detectors read the answer of a reasoning model's output (`reads: answer`, the default): on the tiny local
reasoning model (tests/tiny_thinking.py), each family defined on the answer alone gives the scores of the same
answers given without their reasoning, and its white-box evidence is pooled over the answer's positions; `reads:
reasoning|all` see the other parts and are in the detector's identity."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.backends.select import make_backend
from haldet.config import RunConfig
from haldet.detectors.base import DETECTORS
from haldet.schema import Generation, Instance
from haldet.signals import SampleTexts, Signal, SignalView
from haldet.stages.base import CellContext, Item
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import EvidenceLoader, ensure_stages
from haldet.store import CellStore
from tiny_thinking import build_tiny_thinking

QUESTIONS = ["what is the capital of australia ?", "what city is the capital ?", "what is a large city ?"]


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> tuple[CellContext, list[Item]]:
    model = build_tiny_thinking(tmp_path_factory.mktemp("thinking"))
    cfg = RunConfig.model_validate({"device": "cpu", "generation": {"max_new_tokens": 16},
                                    "sample": {"k": 4, "max_new_tokens": 16, "temperature": 1.5, "top_p": 1.0},
                                    "features": {"groups": ["hidden"], "pooling": ["mean"], "layers": [-1]}})
    backend = make_backend(str(model), cfg)
    items = [Item(instance=Instance(id=f"toy/test/{i}", dataset="toy", scenario="qa_open", task_type="short_answer",
                                    question=q, references=["canberra"]),
                  prompt=backend.render_chat([{"role": "user", "content": q}])) for i, q in enumerate(QUESTIONS)]
    ctx = CellContext(config=cfg, dataset="toy", model=str(model), store=CellStore(tmp_path_factory.mktemp("cell")),
                      backend_factory=lambda: backend)
    attach_generations(items, GenerateStage(ctx).ensure(items))
    ensure_stages(ctx, items, ["sample", "features"])
    return ctx, items


def _views(ctx: CellContext, items: list[Item]) -> tuple[SignalView, SignalView]:
    """The thinking model's outputs, and the same answers given without their reasoning (no thinking block in the
    generations, samples that are the answers alone; the answer's evidence as it is)."""
    loader = EvidenceLoader(ctx, items)
    ids = [i.id for i in items]
    thinking = SignalView(ids=ids, instances=[i.instance for i in items],
                          generations=[i.generation for i in items], loader=loader)
    bare = [Generation(id=g.id, prompt=g.prompt, response=g.response, token_ids=g.token_ids,
                       token_logprobs=g.token_logprobs, finish_reason=g.finish_reason, n_tokens=g.n_tokens,
                       model=g.model) for g in thinking.generations]

    def bare_loader(signal: Signal, which: list[str]) -> list:
        values = loader(signal, which)
        return [list(v) for v in values] if signal is Signal.SAMPLES else values

    return thinking, SignalView(ids=ids, instances=thinking.instances, generations=bare, loader=bare_loader)


@pytest.mark.parametrize("name", ["perplexity", "lexical_similarity", "eigenscore"])
def test_scores_on_a_thinking_model_equal_those_of_its_answers_without_reasoning(cell, name) -> None:
    ctx, items = cell
    assert all(i.generation.reasoning for i in items)  # every output thought first
    thinking, bare = _views(ctx, items)
    det = DETECTORS.get(name)()
    got = det.score(thinking.reading(det.reads)).values
    np.testing.assert_array_equal(got, DETECTORS.get(name)().score(bare).values)
    assert np.isfinite(got).sum() >= 2
    if name != "eigenscore":  # a view with the reasoning in it scores otherwise (the test can tell them apart)
        seen = DETECTORS.get(name)(reads="all")
        assert seen.identity()["reads"] == "all" and "reads" not in det.identity()
        assert not np.allclose(seen.score(thinking.reading("all")).values, got)


def test_white_box_evidence_is_pooled_over_the_answer_after_its_reasoning(cell) -> None:
    """HIDDEN_MEAN and each sample's pooled state equal the last layer's mean over the answer's positions of one
    plain pass over prompt + whole output; the mean over every output position (the reasoning's included) does not."""
    import torch

    ctx, items = cell
    backend = ctx.backend
    hidden = EvidenceLoader(ctx, items)(Signal.HIDDEN_MEAN, [i.id for i in items])
    samples = EvidenceLoader(ctx, items).records("sample")
    for item, pooled in zip(items, hidden, strict=True):
        g = item.generation
        prompt = backend.encode_prompt(item.prompt)
        ids = prompt + g.reasoning_ids + g.token_ids
        with torch.no_grad():
            states = backend.model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0].numpy()
        answer = states[len(prompt) + len(g.reasoning_ids):].mean(axis=0)
        everything = states[len(prompt):].mean(axis=0)
        np.testing.assert_allclose(pooled[0], answer, atol=2e-2)
        assert not np.allclose(pooled[0], everything, atol=2e-2)
        assert samples[item.id]["reasoning"] is not None


def test_reads_is_checked_and_limited_to_the_viewed_signals() -> None:
    with pytest.raises(ValueError, match="not one of answer, reasoning, all"):
        DETECTORS.get("perplexity")(reads="trace")
    with pytest.raises(ValueError, match="exist for the answer alone"):
        DETECTORS.get("eigenscore")(reads="reasoning")


def test_reasoning_view_of_texts_and_log_probs() -> None:
    g = Generation(id="d/s/1", prompt="p", response="canberra .", token_ids=[14, 15], token_logprobs=[-0.1, -0.2],
                   finish_reason="stop", n_tokens=2, model="m", reasoning="sydney", reasoning_ids=[3, 13, 4],
                   reasoning_logprobs=[-1.0, -2.0, -3.0], reasoning_span=[1, 2], answer_tokens=[3, 5])
    view = SignalView(ids=["d/s/1"], instances=[], generations=[g], loader=lambda s, i: [SampleTexts(["a"], ["r"])])
    assert view.reading("reasoning").get(Signal.RESPONSE) == ["sydney"]
    np.testing.assert_array_equal(view.reading("reasoning").get(Signal.TOKEN_LOGPROBS)[0], [-2.0])
    np.testing.assert_array_equal(view.reading("all").get(Signal.TOKEN_LOGPROBS)[0], [-1, -2, -3, -0.1, -0.2])
    assert view.reading("all").get(Signal.SAMPLES) == [["r\n\na"]] and view.get(Signal.SAMPLES) == [["a"]]
