"""The teacher-forced token pass (`haldet.backends.hf.tokens.token_pass`) groups rows by length, so short and long
answers do not share one right-padded batch: the positions it feeds the model stay within a quarter of the real
tokens, and each answer's log-probs are the ones it gets alone. Real passes of the embedded SmolLM2-135M."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.backends.base import TokenRequest
from haldet.backends.hf.backend import HFBackend


@pytest.fixture(scope="module")
def backend() -> HFBackend:
    return HFBackend("smollm2-135m", device="cpu")


def test_short_and_long_answers_are_read_in_passes_of_similar_lengths(backend: HFBackend) -> None:
    head = backend.start_ids()
    lengths = [2, 3, 3, 40, 41, 44]  # one batch would pad the three short rows to 45 positions
    requests = [TokenRequest(prompt_ids=head, answer_ids=[(7 * n + 11 * i) % 5000 + 100 for i in range(n)],
                             key=str(n)) for n in lengths]
    fed: list[tuple[int, int]] = []
    hook = backend.model.register_forward_pre_hook(
        lambda _module, _args, kwargs: fed.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        together = backend.token_pass(requests, top_k=0, entropies=False, attention=False, batch_size=64)
    finally:
        hook.remove()
    real = sum(len(head) + n for n in lengths)
    assert len(fed) >= 2 and sum(rows * width for rows, width in fed) <= 1.25 * real, fed
    alone = [backend.token_pass([r], top_k=0, entropies=False, attention=False, batch_size=1)[0] for r in requests]
    for a, b in zip(together, alone, strict=True):
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-4)
