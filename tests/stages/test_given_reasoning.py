"""Responses given with the data are split into reasoning and answer like generated ones (haldet.text.reasoning
`split_given`, the generate stage's given path): the answer is what detectors read, read after its reasoning by the
proxy model, the reasoning's ids and log-probs are stored, a block that never closes is no answer, and a plain
response keeps its key. Proxy: the tiny reasoning model (tests/tiny_thinking.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from haldet.backends.select import make_backend
from haldet.config import RunConfig, stage_key
from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError
from haldet.schema import Instance, SpanLabel
from haldet.signals import Signal, SignalView
from haldet.stages.base import CellContext, Item
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.store import CellStore
from haldet.text.reasoning import Markers, split_given
from tiny_thinking import build_tiny_thinking

PROMPT = "user : what is the capital of australia ? assistant :"
THOUGHT = "<think> the capital of australia is sydney </think>\n\ncanberra ."
RESPONSES = {"think": THOUGHT, "plain": "canberra .", "cut": "<think> the capital of"}


def test_split_given_keeps_every_character_apart() -> None:
    think = Markers("<think>", "</think>")
    cut = split_given(" <think> hmm, sydney? </think>\n\nCanberra. ", think)
    parts = (cut.before, cut.trace, cut.between, cut.answer)
    assert parts == (" <think>", " hmm, sydney? ", "</think>\n\n", "Canberra.")
    assert cut.reasoning == "hmm, sydney?" and cut.no_answer is None
    assert split_given("Canberra.", think) is None
    # a template that opened the block in the prompt: the response starts inside it
    assert split_given("hmm </think> Canberra.", think).answer == "Canberra."
    cut = split_given("<think> hmm, let me", think)
    assert cut.answer == "" and cut.no_answer.startswith("no answer") and "reasoning.split: off" in cut.no_answer


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_thinking(tmp_path_factory.mktemp("thinking"))


def _generate(tmp: Path, model: Path, responses: dict[str, str], **config: object
              ) -> tuple[CellContext, list[Item], dict]:
    cfg = RunConfig.model_validate({"device": "cpu", **config})
    backend = make_backend(str(model), cfg)
    items = [Item(instance=Instance(id=f"toy/test/{name}", dataset="toy", scenario="qa_open",
                                    task_type="short_answer", question="what is the capital of australia ?",
                                    references=["canberra"], response=text), prompt=PROMPT)
             for name, text in responses.items()]
    ctx = CellContext(config=cfg, dataset="toy", model=str(model), store=CellStore(tmp),
                      backend_factory=lambda: backend)
    recs = GenerateStage(ctx).ensure(items)
    attach_generations(items, recs)
    return ctx, items, {i.id.split("/")[-1]: recs[i.id] for i in items}


def _forced_logprobs(backend, ids: list[int], start: int) -> np.ndarray:
    """log p(ids[t] | ids[:t]) for t >= start, from one plain forward pass (computed here, not by haldet)."""
    import torch

    with torch.no_grad():
        logits = backend.model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    return np.array([float(logp[t - 1, ids[t]]) for t in range(start, len(ids))])


def test_a_given_thinking_block_is_split_and_the_answer_read_after_it(tmp_path, model) -> None:
    ctx, items, rec = _generate(tmp_path, model, RESPONSES)
    think, plain, cut = rec["think"], rec["plain"], rec["cut"]
    assert think["response"] == plain["response"] == "canberra ." and think["provided"]
    assert think["reasoning"] == "the capital of australia is sydney" and plain["reasoning"] is None
    assert think["token_ids"] == plain["token_ids"]  # the same answer tokens
    backend = ctx.backend
    prompt = backend.encode_prompt(PROMPT)
    assert think["reasoning_ids"] == backend.encode_text("<think> the capital of australia is sydney </think>")
    r0, r1 = think["reasoning_span"]
    assert backend.answer_text(think["reasoning_ids"][r0:r1]) == think["reasoning"]
    assert think["answer_tokens"] == [len(think["reasoning_ids"]), len(think["reasoning_ids"]) + 2]
    # the answer's log-probs are read after prompt + reasoning, the reasoning's after the prompt (by hand)
    whole = prompt + think["reasoning_ids"] + think["token_ids"]
    np.testing.assert_allclose(think["token_logprobs"],
                               _forced_logprobs(backend, whole, len(prompt) + len(think["reasoning_ids"])), atol=1e-4)
    np.testing.assert_allclose(think["reasoning_logprobs"],
                               _forced_logprobs(backend, whole, len(prompt))[: len(think["reasoning_ids"])],
                               atol=1e-4)
    # a block that never closes: no answer, never read, its reason said
    assert cut["response"] == "" and cut["no_answer"].startswith("no answer") and cut["n_tokens"] == 0
    assert cut["reasoning"] == "the capital of"
    # the split is in the key; a plain response keeps the key it had before
    stage = GenerateStage(ctx)
    plain_item = next(i for i in items if i.id.endswith("plain"))
    assert plain["key"] == stage_key("generate", backend.fingerprint(), PROMPT, {"provided": "canberra ."},
                                     {"parts": [], "top_k": None, "version": "tokens-v1"})
    assert think["key"] != stage.key(Item(instance=plain_item.instance.model_copy(update={"response": "x"}),
                                          prompt=PROMPT)) and plain["key"] == stage.key(plain_item)


def test_detectors_read_the_given_answer_alone(tmp_path, model) -> None:
    """A text detector scores the split response as the same answer given without its thinking block; the
    reasoning view sees the trace. Negative control: with `reasoning.split: off` the whole text is the answer, and
    the scores part."""
    _, items, _ = _generate(tmp_path / "on", model, {"think": THOUGHT, "plain": "canberra ."})
    view = SignalView(ids=[i.id for i in items], instances=[i.instance for i in items],
                      generations=[i.generation for i in items], loader=lambda s, ids: [])
    ppl = DETECTORS.get("perplexity")()
    assert view.get(Signal.RESPONSE) == ["canberra .", "canberra ."]
    assert view.reading("reasoning").get(Signal.RESPONSE)[0] == "the capital of australia is sydney"
    scores = ppl.score(view).values
    lps = items[0].generation.token_logprobs
    assert scores[0] == pytest.approx(np.exp(-np.mean(lps)))  # perplexity over the answer's tokens alone
    _, off, _ = _generate(tmp_path / "off", model, {"think": THOUGHT}, reasoning={"split": "off"})
    whole = off[0].generation
    assert whole.response == THOUGHT and whole.reasoning is None and len(whole.token_ids) == 10
    seen = ppl.score(SignalView(ids=[off[0].id], instances=[off[0].instance], generations=[whole],
                                loader=lambda s, ids: [])).values
    assert seen[0] == pytest.approx(np.exp(-np.mean(whole.token_logprobs))) and abs(seen[0] - scores[0]) > 1e-3


def test_units_on_the_whole_text_are_refused(tmp_path, model) -> None:
    cfg = RunConfig.model_validate({"device": "cpu"})
    backend = make_backend(str(model), cfg)
    inst = Instance(id="toy/test/u", dataset="toy", scenario="qa_open", task_type="short_answer", question="q",
                    response=THOUGHT, units=[SpanLabel(start=0, end=7, text="<think>", kind="sentence",
                                                       category="correct")])
    ctx = CellContext(config=cfg, dataset="toy", model=str(model), store=CellStore(tmp_path),
                      backend_factory=lambda: backend)
    with pytest.raises(HaldetError, match="unit labels on the whole text"):
        GenerateStage(ctx).ensure([Item(instance=inst, prompt=PROMPT)])
