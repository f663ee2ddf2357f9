"""A run's samples start from the prompts its greedy decoding read (`flow.cell.samples_follow`), and the cell
forgets what it kept; without samples to draw nothing is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

import haldet
from haldet.backends.hf.prompt_states import PromptStates
from haldet.config import RunConfig

SMALL = {"limit": 6, "generation": {"max_new_tokens": 6}, "sample": {"k": 2, "max_new_tokens": 6}}


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> list[PromptStates]:
    """Every `PromptStates` made while the test runs, with what each kept and handed out."""
    made: list[PromptStates] = []
    real_init, real_keep, real_take = PromptStates.__init__, PromptStates.keep, PromptStates.take

    def init(self: PromptStates, *args, **kwargs) -> None:
        real_init(self, *args, **kwargs)
        self.kept_total, self.given = 0, 0
        made.append(self)

    def keep(self: PromptStates, key, nbytes, copy) -> None:
        before = len(self)
        real_keep(self, key, nbytes, copy)
        self.kept_total += len(self) - before

    def take(self: PromptStates, keys):
        states = real_take(self, keys)
        self.given += len(states or [])
        return states

    monkeypatch.setattr(PromptStates, "__init__", init)
    monkeypatch.setattr(PromptStates, "keep", keep)
    monkeypatch.setattr(PromptStates, "take", take)
    return made


def test_the_samples_start_from_the_greedy_prompts_and_the_cell_forgets_them(tmp_path: Path, stores):
    config = RunConfig.model_validate({**SMALL, "detectors": ["lexical_similarity"]})
    _, cells = haldet.run(config, tmp_path / "run")
    assert not cells[0].error
    (store,) = stores
    assert store.kept_total == 6  # every greedy prompt kept
    assert store.given == store.taken > 0  # the samples started from them (the evaluated items' prompts)
    assert len(store) == 0 and store.used == 0  # and what the samples did not take was forgotten


def test_nothing_is_kept_when_no_sample_is_drawn(tmp_path: Path, stores):
    config = RunConfig.model_validate({**SMALL, "detectors": ["perplexity"]})
    _, cells = haldet.run(config, tmp_path / "run")
    assert not cells[0].error
    (store,) = stores
    assert store.kept_total == 0 and store.given == 0
