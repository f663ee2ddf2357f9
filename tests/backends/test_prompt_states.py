"""Samples start from the greedy decoding's read prompts (`PromptStates`) and equal samples read afresh."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.pool import rows_joined
from haldet.backends.hf.prompt_states import PromptStates

QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?",
             "Name the largest planet of the solar system and say why it is so large.",
             "How many legs does a spider have?", "What colour is the sky on a clear day?"]
SAMPLING = dict(k=3, temperature=1.0, top_p=0.9, seeds=[11, 12, 13, 14, 15], max_new_tokens=12, batch_size=6)


@pytest.fixture(scope="module")
def backend() -> HFBackend:
    return HFBackend("smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def prompts(backend: HFBackend) -> list[str]:
    return [backend.render_chat([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": q}])
            for q in QUESTIONS]


@pytest.fixture(scope="module")
def afresh(backend: HFBackend, prompts: list[str]) -> list[list]:
    backend.forget_prompts()
    return backend.sample(prompts, **SAMPLING)


def _tokens(outs: list[list]) -> list[list[list[int]]]:
    return [[s.token_ids for s in per_prompt] for per_prompt in outs]


def _keep(backend: HFBackend, prompts: list[str]) -> None:
    with backend.keeping_prompts():  # greedy prompts read three at a time, the samples' two at a time: the kept
        backend.generate(prompts, max_new_tokens=8, batch_size=3)  # rows are joined in other groups than read


def test_samples_from_kept_prompts_equal_samples_read_afresh(backend, prompts, afresh):
    _keep(backend, prompts)
    kept = backend.prompt_states
    assert len(kept) == len(prompts) and kept.used > 0
    taken_before = kept.taken
    reused = backend.sample(prompts, **SAMPLING)
    assert kept.taken - taken_before == len(prompts)  # every prompt started from its kept state
    assert len(kept) == 0 and kept.used == 0  # taken out: nothing held twice
    assert _tokens(reused) == _tokens(afresh)
    for mine, theirs in zip(reused, afresh, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-4)


def test_a_kept_state_is_what_the_samples_read(backend, prompts, afresh):
    """Negative control: a kept prompt's cache damaged on purpose changes its samples (the state is really read)."""
    _keep(backend, prompts)
    damaged, _ = backend.prompt_states.kept[tuple(backend.encode_prompt(prompts[0]))]
    with torch.inference_mode():
        for layer in damaged.cache.layers:
            layer.keys.mul_(0.0)
    reused = backend.sample(prompts, **SAMPLING)
    assert _tokens(reused)[0] != _tokens(afresh)[0]
    assert _tokens(reused)[1:] == _tokens(afresh)[1:]


def test_nothing_is_kept_outside_keeping_prompts_or_past_the_budget(backend, prompts):
    backend.forget_prompts()
    backend.generate(prompts, max_new_tokens=4, batch_size=2)
    assert len(backend.prompt_states) == 0
    _keep(backend, prompts[:1])
    one_prompt = backend.prompt_states.used
    backend.forget_prompts()
    small = PromptStates(budget=2 * one_prompt)  # room for about two prompts of this length
    backend.prompt_states, before = small, backend.prompt_states
    try:
        _keep(backend, prompts)
        assert 0 < len(small) < len(prompts) and small.used <= small.budget
    finally:
        backend.prompt_states = before


def test_take_gives_nothing_unless_every_prompt_is_kept(backend, prompts):
    backend.forget_prompts()
    _keep(backend, prompts[:2])
    states = backend.prompt_states
    ids = [tuple(backend.encode_prompt(p)) for p in prompts[:3]]
    assert states.take(ids) is None and len(states) == 2  # the third is missing: nothing taken
    assert states.take([ids[0], ids[0]]) is None and len(states) == 2  # a prompt twice: read again
    state = rows_joined(states.take(ids[:2]), room=4)
    assert len(states) == 0 and states.used == 0
    assert state.logits.shape[0] == 2 and torch.isfinite(state.logits).all()
    assert state.mask.sum(dim=-1).tolist() == [len(ids[0]), len(ids[1])]  # each row holds its own prompt
    assert state.last_pos.tolist() == [len(ids[0]) - 1, len(ids[1]) - 1]
