"""Schema: validation and the JSONL round trip."""

import math

import pytest
from pydantic import ValidationError

from haldet.schema import Category, Generation, Instance, Label, Score, SpanLabel


def make_instance(**kw):
    base = dict(id="halueval_qa/data/7", dataset="halueval_qa", scenario="qa_grounded", task_type="grounded_qa",
                context="Paris is the capital of France.", question="Capital of France?", references=["Paris"],
                incorrect=["Lyon"], options={}, meta={"language": "en"}, source={"raw": [1, 2]})
    base.update(kw)
    return Instance(**base)


def test_instance_round_trip():
    inst = make_instance(options={"A": "Paris", "B": "Lyon"})
    line = inst.to_json_line()
    assert "\n" not in line
    assert Instance.from_json_line(line) == inst


def test_generation_label_score_round_trip():
    gen = Generation(id="d/s/1", prompt="p", response="Paris.", token_ids=[5, 6], token_logprobs=[-0.1, -0.2],
                     finish_reason="stop", n_tokens=2, model="m")
    assert Generation.from_json_line(gen.to_json_line()) == gen
    lab = Label(id="d/s/1", category=Category.HALLUCINATION, reasoning="r", judge="rule:short_answer",
                spans=[SpanLabel(start=0, end=5, category=Category.HALLUCINATION, text="Paris", kind="entity")])
    assert Label.from_json_line(lab.to_json_line()) == lab
    sc = Score(detector="perplexity", id="d/s/1", value=float("nan"), reason="empty response")
    back = Score.from_json_line(sc.to_json_line())
    assert math.isnan(back.value) and back.reason == "empty response"


@pytest.mark.parametrize("bad", [
    dict(id="no-slashes"),
    dict(id="a//b"),
    dict(question="", context="", instruction=""),
    dict(unknown_field=1),
])
def test_instance_rejects_bad_fields(bad):
    with pytest.raises(ValidationError):
        make_instance(**bad)


def test_generation_requires_aligned_tokens():
    with pytest.raises(ValidationError, match="must agree"):
        Generation(id="d/s/1", prompt="p", response="x", token_ids=[1, 2], token_logprobs=[-0.1],
                   finish_reason="stop", n_tokens=2, model="m")


def test_nan_score_needs_reason_and_span_order():
    with pytest.raises(ValidationError, match="without a reason"):
        Score(detector="d", id="a/b/c", value=float("nan"))
    with pytest.raises(ValidationError):
        SpanLabel(start=5, end=2, category=Category.CORRECT)
