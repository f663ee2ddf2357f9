"""`load_tokenizer`: the tokenizer alone, set up as `HFBackend` sets up its own (what token-level detectors such as
sar and ccp decode with), without loading weights."""

from __future__ import annotations

import pytest

from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.loading import load_tokenizer
from haldet.errors import HaldetError


def test_same_tokenizer_as_the_backend_and_no_weights() -> None:
    backend = HFBackend("smollm2-135m")
    alone = load_tokenizer("smollm2-135m")
    text = "Paris is the capital of France."
    ids = backend.encode_text(text)
    assert alone(text, add_special_tokens=False).input_ids == ids
    assert (alone.padding_side, alone.pad_token_id) == ("left", backend.tokenizer.pad_token_id)
    assert alone.pad_token_id is not None
    assert alone.decode(ids, skip_special_tokens=True) == backend.answer_text(ids)
    assert backend._model is None  # neither call loaded the weights


def test_a_model_that_is_not_there_is_one_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(HaldetError):
        load_tokenizer(str(tmp_path / "no-such-model"))
