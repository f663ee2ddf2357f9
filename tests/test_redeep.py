"""ReDeEP: its two scores on a tiny randomly initialised Llama built here (known answers from the model's own
pass), the too-long and no-context reasons, and the head/layer choice of the detector on synthetic evidence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from haldet.signals import Signal
from haldet.testing.conformance import synthetic_view
from tiny_llama import build_tiny_llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    from haldet.backends.hf.backend import HFBackend

    # layer 1's feed-forward adds nothing: its PKS must be exactly 0
    return HFBackend(str(build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), zero_mlp_layer=1)))


CONTEXT = "canberra is the capital of australia . sydney is a large city ."
PROMPT = f"user : context : {CONTEXT} question : what is the capital of australia ? assistant :"


def test_scores_match_their_definitions_on_a_tiny_llama(tiny) -> None:
    answer = tiny.encode_text("the capital is sydney .")
    x = tiny.redeep_features(PROMPT, answer, CONTEXT, top_ratio=1.0, max_tokens=256)
    assert x.shape == (3, 3)  # 3 layers x (2 heads + PKS)
    assert x[1, -1] == pytest.approx(0.0, abs=1e-6) and (x[[0, 2], -1] > 1e-6).all()
    # with every context token pooled, each head's ECS is cos(mean context state, answer state), averaged
    ids = tiny.encode_prompt(PROMPT)
    with torch.no_grad():
        last = tiny.model(input_ids=torch.tensor([ids + answer]), output_hidden_states=True).hidden_states[-1][0]
    words = PROMPT.split()
    c0 = words.index("canberra") + (len(ids) - len(words))
    pooled = last[c0 : c0 + len(CONTEXT.split())].mean(0)
    expected = torch.nn.functional.cosine_similarity(last[len(ids):], pooled.unsqueeze(0), dim=-1).mean()
    assert np.allclose(x[:, :-1], float(expected), atol=1e-5)


def test_items_it_cannot_process_get_the_reason(tiny) -> None:
    answer = tiny.encode_text("the capital is sydney .")
    too_long = tiny.redeep_features(PROMPT, answer, CONTEXT, top_ratio=0.1, max_tokens=16)
    assert isinstance(too_long, str) and "exceed redeep.max_tokens = 16" in too_long
    assert "not appear" in tiny.redeep_features(PROMPT, answer, "melbourne", top_ratio=0.1, max_tokens=256)


def test_detector_picks_the_informative_head_and_layer() -> None:
    from haldet.detectors.redeep import ReDeEP

    det = ReDeEP(top_heads=1, top_layers=1)
    train = synthetic_view({Signal.REDEEP_FEATURES}, n=60, seed=1)
    det.fit(train, None)
    assert det.heads == [0] and det.layers == [0]  # the synthetic signal lives in head 0 and layer 0's PKS
    test = synthetic_view({Signal.REDEEP_FEATURES}, n=60, seed=2)
    s = det.score(test).values
    y = np.asarray(test.labels)
    assert s[y == 1].mean() > s[y == 0].mean() + 1.0
