"""LLM-Check-style scores: known covariance spectra and attention diagonals, and the validation layer choice."""

from __future__ import annotations

import numpy as np
import pytest

from haldet.backends.hf.llmcheck import ALPHA, choose_layer, hidden_score


def log_diagonal(attn: np.ndarray) -> np.ndarray:
    """The reference the token pass's `attn_logdiag` is checked against: [T] sum over heads of log A[t, t] for one
    layer's attention [H, T, T] (any floating array type)."""
    diag = np.diagonal(np.asarray(attn, dtype=np.float64), axis1=-2, axis2=-1)
    return np.log(np.clip(diag, 1e-30, None)).sum(axis=0)


def test_hidden_score_is_mean_log_eigenvalue_of_the_centred_states() -> None:
    # two tokens differing by (2, 0, 0): centred rows (+-1, 0, 0) -> sigma^2 = {2, 0}
    states = np.array([[3.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    assert hidden_score(states) == pytest.approx((np.log(2 + ALPHA) + np.log(ALPHA)) / 2)
    # more spread -> higher score; a shift of every token changes nothing
    assert hidden_score(states * 3) > hidden_score(states)
    assert hidden_score(states + 7.0) == pytest.approx(hidden_score(states))


def test_layer_and_direction_are_chosen_on_validation() -> None:
    y = np.array([1, 1, 0, 0, -1])
    scores = np.array([[0.5, -3.0, 1.0], [0.5, -2.0, 0.0], [0.5, 2.0, 1.0], [0.5, 3.0, 0.0], [9.0, 9.0, 9.0]])
    # layer 0 is constant (AUROC 0.5), layer 1 separates perfectly when negated, layer 2 is at chance
    assert choose_layer(scores, y) == (1, -1.0, 1.0)
    assert choose_layer(scores, np.array([0, 0, 0, 0, -1]))[0] == -1  # no hallucinated unit: nothing to choose


def test_unit_scores_from_layer_arrays() -> None:
    from haldet.backends.hf.llmcheck import unit_hidden_scores

    attn = np.array([[[1.0, 0.0], [0.5, 0.5]], [[1.0, 0.0], [0.75, 0.25]]])  # [H=2, T=2, T=2]
    assert log_diagonal(attn) == pytest.approx([0.0, np.log(0.5) + np.log(0.25)])
    rng = np.random.default_rng(0)
    states = rng.normal(size=(3, 5, 4))
    out = unit_hidden_scores(states, [(0, 2), (2, 5), (5, 5)])
    assert out.shape == (3, 3) and np.isnan(out[:, 2]).all()
    assert out[1, 1] == pytest.approx(hidden_score(states[1, 2:5]))


def test_token_pass_layers_part_matches_a_separate_forward() -> None:
    """The `layers` part of the one teacher-forced pass equals the formulas applied to a plain eager forward."""
    import torch

    from haldet.backends.base import TokenRequest
    from haldet.backends.hf.backend import HFBackend

    backend = HFBackend("smollm2-135m")
    prompt = backend.encode_prompt("Summarise: the river flooded forty homes on Tuesday.\n")
    answer, _ = backend.encode_response("Forty homes flooded. Nobody was hurt.")
    spans = [(0, 4), (4, len(answer)), (0, len(answer))]
    (out,) = backend.token_pass([TokenRequest(prompt, answer, "x", spans)], top_k=0, entropies=False,
                                attention=False, batch_size=1, layers=True)
    model = backend.model
    original = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            ref = model(input_ids=torch.tensor([prompt + answer]), output_hidden_states=True, output_attentions=True)
    finally:
        model.set_attn_implementation(original)
    start = len(prompt)
    want_diag = np.stack([log_diagonal(a[0, :, start:, start:].float().numpy()) for a in ref.attentions])
    assert out.attn_logdiag.shape == (len(ref.attentions), len(answer))
    assert np.allclose(out.attn_logdiag, want_diag, atol=1e-3)
    states = np.stack([h[0, start:].double().numpy() for h in ref.hidden_states])
    assert out.span_hidden.shape == (len(ref.hidden_states), 3)
    for k, (a, b) in enumerate(spans):
        assert out.span_hidden[5, k] == pytest.approx(hidden_score(states[5, a:b]), abs=1e-3)
