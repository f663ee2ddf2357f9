"""Reasoning and answer apart (haldet.text.reasoning): the split on ids and on text, a tiny local reasoning model
whose chat template opens a thinking block (tests/tiny_thinking.py) through the generate, sample and features
stages, and an endpoint's separate reasoning field (tests/mock_openai.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from haldet.backends.select import make_backend
from haldet.config import RunConfig
from haldet.schema import Instance
from haldet.signals import Signal
from haldet.stages.base import CellContext, Item
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.stages.loader import ensure_stages
from haldet.store import CellStore
from haldet.text.reasoning import Markers, split_ids, split_text
from tiny_thinking import build_tiny_thinking


def test_split_ids_finds_the_answer_after_the_closing_marker() -> None:
    cut = split_ids([9, 1, 2, 3, 8, 4, 5], [9], [8], opens_in_prompt=False, finish_reason="stop")
    assert (cut.r0, cut.r1, cut.a0, cut.no_answer) == (1, 4, 5, None)
    # the prompt opened the block: the output starts inside it
    assert split_ids([1, 2, 8, 4], [9], [8], opens_in_prompt=True, finish_reason="stop").a0 == 3
    # no marker at all: all answer; unclosed: no answer, and which limit to raise
    assert split_ids([1, 2], [9], [8], opens_in_prompt=False, finish_reason="stop").a0 == 0
    cut = split_ids([9, 1, 2], [9], [8], opens_in_prompt=False, finish_reason="length", limit=3)
    assert cut.a0 == 3 and "generation.max_new_tokens" in cut.no_answer and "(3 tokens)" in cut.no_answer


def test_split_text() -> None:
    think = Markers("<think>", "</think>")
    assert split_text("<think> hmm </think>\n\nParis.", think).answer == "Paris."
    assert split_text("<think> hmm </think>\n\nParis.", think).reasoning == "hmm"
    assert split_text("Paris.", think).reasoning is None
    cut = split_text("<think> hmm, let me", think, finish_reason="length")
    assert cut.answer == "" and cut.no_answer.startswith("no answer")


@pytest.fixture(scope="module")
def thinking_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_thinking(tmp_path_factory.mktemp("thinking"))


def _cell(tmp: Path, model: Path, **config: object) -> tuple[CellContext, list[Item]]:
    cfg = RunConfig.model_validate({"device": "cpu", "sample": {"k": 2, "max_new_tokens": 16},
                                    "features": {"groups": ["hidden"], "pooling": ["mean"], "layers": [-1]},
                                    **config})
    backend = make_backend(str(model), cfg)
    inst = Instance(id="toy/test/0", dataset="toy", scenario="qa_open", task_type="short_answer",
                    question="what is the capital of australia ?", references=["canberra"])
    items = [Item(instance=inst, prompt=backend.render_chat([{"role": "user", "content": inst.question}]))]
    return CellContext(config=cfg, dataset="toy", model=str(model), store=CellStore(tmp),
                       backend_factory=lambda: backend), items


def test_local_reasoning_model_stores_reasoning_and_answer_apart(tmp_path, thinking_dir) -> None:
    ctx, items = _cell(tmp_path, thinking_dir, generation={"max_new_tokens": 16})
    ctx.signals = frozenset({Signal.ANSWER_ENTROPIES, Signal.TOKEN_ENTROPIES, Signal.HIDDEN_MEAN})  # a token pass
    rec = GenerateStage(ctx).ensure(items)["toy/test/0"]
    assert rec["reasoning"] == "the capital of australia is sydney"
    assert rec["response"] == "canberra ."
    assert rec["answer_tokens"] == [7, 9] and rec["reasoning_span"] == [0, 6] and rec["no_answer"] is None
    assert len(rec["token_ids"]) == len(rec["token_logprobs"]) == 2 and len(rec["reasoning_ids"]) == 7
    assert ctx.backend.fingerprint()["reasoning_split"]["opens_in_prompt"] is True  # the split is in every key
    attach_generations(items, {"toy/test/0": rec})
    recs = ensure_stages(ctx, items, ["sample", "features"])
    assert recs["sample"]["toy/test/0"]["reasoning"][0] is not None
    # the features pass reads the answer after the reasoning: its log-probs are the generated answer's
    assert recs["features"]["toy/test/0"]["logprob_gap"] < 1e-4
    assert recs["features"]["toy/test/0"]["n_answer_tokens"] == 2
    # the token pass reads the answer after its reasoning too: its entropies are the features pass's
    np.testing.assert_allclose(rec["tokens"]["entropies"], recs["features"]["toy/test/0"]["token_entropies"],
                               atol=1e-4)


def test_split_off_keeps_the_whole_output_and_the_old_key(tmp_path, thinking_dir) -> None:
    ctx, items = _cell(tmp_path, thinking_dir, generation={"max_new_tokens": 16}, reasoning={"split": "off"})
    assert "reasoning_split" not in ctx.backend.fingerprint()
    rec = GenerateStage(ctx).ensure(items)["toy/test/0"]
    assert rec["reasoning"] is None and rec["response"] == "the capital of australia is sydney </think> canberra ."


def test_an_output_cut_off_inside_its_reasoning_has_no_answer(tmp_path, thinking_dir) -> None:
    ctx, items = _cell(tmp_path, thinking_dir, generation={"max_new_tokens": 4})
    rec = GenerateStage(ctx).ensure(items)["toy/test/0"]
    assert rec["response"] == "" and rec["token_ids"] == []
    assert "generation.max_new_tokens" in rec["no_answer"] and "(4 tokens)" in rec["no_answer"]


def test_endpoint_reasoning_field_and_inline_block(tmp_path) -> None:
    from mock_openai import FakeOpenAI, text_content

    with FakeOpenAI(content=text_content, default="ok:Canberra.") as srv:
        srv.reasoning = "The capital is not Sydney."
        cfg = RunConfig.model_validate({"endpoint": {"base_url": srv.base_url, "api_key_env": "NONE_KEY"}})
        backend = make_backend("openai:mock", cfg)
        out = backend.generate(["Capital of Australia?"], max_new_tokens=32, batch_size=1)[0]
        assert out.text == "Canberra." and out.extra["reasoning"] == "The capital is not Sydney."
        assert out.extra["answer_tokens"] == [0, 1]
        srv.reasoning = None
        srv.default = "ok:<think> Sydney? no. </think> Canberra is the capital."
        out = backend.generate(["Capital of Australia?"], max_new_tokens=32, batch_size=1)[0]
        assert out.text == "Canberra is the capital." and out.extra["reasoning"] == "Sydney? no."
        assert out.extra["tokens"] == [" Canberra", " is", " the", " capital."]
        np.testing.assert_allclose(out.token_logprobs, [-0.5, -0.6, -0.7, -0.8])  # tokens 5-8 of the content


def test_vllm_outputs_split_as_the_hf_backend_splits(thinking_dir) -> None:
    """The vllm backend (a tokenizer-only HFBackend) splits its completions with the same code: checked with the
    tiny model's backend standing in for it (vLLM itself needs a GPU)."""
    from haldet.backends.base import GenOutput
    from haldet.backends.vllm import VLLMBackend

    backend = make_backend(str(thinking_dir), RunConfig(device="cpu"))
    ids = backend.encode_text("the capital </think> canberra .")
    out = VLLMBackend.answer_of(backend, GenOutput(text="raw", token_ids=ids, token_logprobs=[-0.5] * len(ids),
                                                   finish_reason="stop"))
    assert out.text == "canberra ." and out.extra["reasoning"] == "the capital" and out.extra["answer_tokens"] == [3, 5]
