"""LettuceDetect through its package (the `lettucedetect` extra) on a tiny, randomly initialised ModernBERT
token classifier built here (the published checkpoints' architecture class, MiniLM's tokenizer): the adapter's
answer-token alignment and its response / unit scores against the classifier's own probabilities, computed
directly; the missing extra and a missing checkpoint each give one clear error."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_detectors_standard import view

from haldet.errors import HaldetError
from haldet.schema import SpanLabel

pytest.importorskip("lettucedetect")

ANSWER = "Paris is the capital. It has two million people."
CONTEXT = "Paris is the capital of France. About 2.1 million people live there."


@pytest.fixture(scope="module")
def tiny_lettuce(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertForTokenClassification

    from haldet.util.assets import resolve_embedding

    path = tmp_path_factory.mktemp("tiny-lettuce")
    tok = AutoTokenizer.from_pretrained(resolve_embedding("minilm"))
    torch.manual_seed(3)
    config = ModernBertConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_labels=2, pad_token_id=tok.pad_token_id,
                              bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
                              cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
                              initializer_range=0.5, max_position_embeddings=512)
    ModernBertForTokenClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _direct_probs(path: Path, question: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """P(hallucinated) of each answer token and its character span, from the classifier itself."""
    import torch
    from lettucedetect.detectors.prompt_utils import PromptUtils
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForTokenClassification.from_pretrained(path).eval()
    prompt = PromptUtils.format_context([CONTEXT], question, "en")
    enc = tok(prompt, ANSWER, return_offsets_mapping=True, return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].tolist()
    second = enc.sequence_ids(0)
    with torch.no_grad():
        probs = torch.softmax(model(**enc).logits[0], dim=-1)[:, 1].numpy()
    keep = [i for i, s in enumerate(second) if s == 1 and offsets[i][1] > offsets[i][0]]
    return probs[keep].astype(np.float64), [tuple(offsets[i]) for i in keep]  # type: ignore[misc]


def _view(**extra: Any):  # type: ignore[no-untyped-def]
    v = view([ANSWER, ANSWER, ""], {})
    for inst in v.instances:
        inst.question, inst.context = "How big is Paris?", CONTEXT
    v.instances[1].context = ""
    for inst in v.instances:
        inst.response = ANSWER
        inst.units = [SpanLabel(start=0, end=21, category="correct", kind="sentence"),
                      SpanLabel(start=22, end=len(ANSWER), category="hallucination", kind="sentence")]
    return v


def test_lettucedetect_scores_are_the_classifiers_token_probabilities(tiny_lettuce) -> None:  # type: ignore[no-untyped-def]
    from haldet.detectors.base import DETECTORS

    det = DETECTORS.get("lettucedetect")(model=str(tiny_lettuce), max_length=512, device="cpu")
    probs, offsets = _direct_probs(tiny_lettuce, "How big is Paris?")
    v = _view()
    out = det.score(v)
    assert out.values[0] == pytest.approx(probs.max(), abs=1e-6)
    assert np.isnan(out.values[1]) and out.reasons[1] == "no context to verify the answer against"
    assert np.isnan(out.values[2]) and out.reasons[2] == "empty response"
    units = det.score_units(v, "sentence")
    first = [p for p, (s, e) in zip(probs, offsets, strict=True) if s < 21]
    second = [p for p, (s, e) in zip(probs, offsets, strict=True) if e > 22]
    assert units.values[0] == pytest.approx([max(first), max(second)], abs=1e-6)
    assert units.reasons[1] == ["no context to verify the answer against"] * 2
    assert det.identity()["models"]["model"]["fingerprint"]  # the checkpoint is named and fingerprinted


def test_lettucedetect_without_the_extra_or_the_checkpoint_says_so(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from haldet.detectors import lettuce_detect

    with pytest.raises(HaldetError, match="cannot load LettuceDetect checkpoint"):
        lettuce_detect.load_verifier(str(tmp_path / "missing"), 512, "cpu")
    monkeypatch.setitem(sys.modules, "lettucedetect.models.inference", None)
    with pytest.raises(HaldetError) as err:
        lettuce_detect.load_verifier(str(tmp_path / "other"), 512, "cpu")
    assert "haldet[lettucedetect]" in str(err.value.hint)
