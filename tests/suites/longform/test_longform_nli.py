"""Claim labels by NLI against a reference text: passages chosen by word overlap, supported = some passage's most
likely class is entailment, the source and the data's label recorded per claim; the agreement with the data."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from haldet.datasets.base import DATASETS
from haldet.models.pairs.base import PairModel
from haldet.schema import Category, Instance, SpanLabel
from haldet.suites.longform import nli_labels
from haldet.suites.longform.agreement import label_agreement
from haldet.suites.longform.nli_labels import closest, label_claims, passages
from haldet.text.claim_spans import content_words
from repo_paths import FIXTURES

FIXTURE = FIXTURES / "factscore_bio"


class WordNLI(PairModel):
    """Entailment when every content word of the hypothesis is in the premise; contradiction when the premise
    holds the word 'never'; neutral otherwise. Counts the pairs it computes."""

    kind, width, columns = "nli", 3, ("entailment", "neutral", "contradiction")

    def __init__(self) -> None:
        super().__init__("word-nli")
        self.seen: list[tuple[str, str]] = []

    def compute(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self.seen += list(pairs)
        out = []
        for premise, claim in pairs:
            words = set(content_words(premise))
            row = ([0.1, 0.1, 0.8] if "never" in words else
                   [0.8, 0.1, 0.1] if set(content_words(claim)) <= words else [0.2, 0.7, 0.1])
            out.append(row)
        return np.array(out, dtype=np.float64)


@pytest.fixture
def word_nli(monkeypatch: pytest.MonkeyPatch) -> WordNLI:
    model = WordNLI()
    monkeypatch.setattr(nli_labels, "load_pair_model", lambda kind, name, fallback=None: (
        model, {"requested": name, "loaded": name, "used": model.id}))
    return model


REFERENCE = ("Ada Lovelace was an English mathematician. She was born in London in 1815. Her father was Lord "
             "Byron. She worked with Charles Babbage. She never attended a university. She died in 1852.")


def _instance(claims: list[tuple[str, int | None]]) -> Instance:
    answer = " ".join(c for c, _ in claims)
    units, at = [], 0
    for text, label in claims:
        cat = {None: Category.INVALID, 0: Category.CORRECT, 1: Category.HALLUCINATION}[label]
        units.append(SpanLabel(start=at, end=at + len(text), text=text, kind="claim", category=cat,
                               meta={"labels": {"source": "data"}} if label is not None else {}))
        at += len(text) + 1
    return Instance(id="d/test/ada", dataset="d", scenario="longform", task_type="long_form",
                    question="Tell me a bio of Ada Lovelace.", references=[REFERENCE], response=answer, units=units)


def test_passages_and_lexical_choice() -> None:
    chunks = passages(REFERENCE, 2)
    assert chunks == ["Ada Lovelace was an English mathematician. She was born in London in 1815.",
                      "Her father was Lord Byron. She worked with Charles Babbage.",
                      "She never attended a university. She died in 1852."]
    assert closest("Lovelace died in 1815.", chunks, 2) == [0, 2]  # 2 words shared (lovelace, 1815), then 1 (died)
    assert closest("Lovelace was born in 1815.", chunks, 2) == [0, 1]  # a tie at 0 words: the earlier passage
    assert closest("Babbage and Byron", chunks, 1) == [1]


def test_nli_labels_follow_the_best_passage_and_record_their_source(word_nli: WordNLI, tmp_path: Path) -> None:
    inst = _instance([("Ada Lovelace was born in London.", 0),        # entailed by passage 0
                      ("She studied at a university.", 0),            # 'never' passage contradicts: not supported
                      ("Her father was Lord Tennyson.", 1),           # no passage entails it
                      ("She worked with Charles Babbage.", None)])    # unlabelled in the data, entailed
    [out], meta = label_claims([inst], model="word-nli", k=2, sentences=2, cache=tmp_path)
    assert [u.binary for u in out.units] == [0, 1, 1, 0]
    labels = [u.meta["labels"] for u in out.units]
    assert all(lab["source"] == "nli:nli:word-nli" for lab in labels)
    assert labels[0]["evidence"].startswith("Ada Lovelace was an English")
    assert labels[1]["p_contradict"] == 0.8 and labels[1]["data_label"] == 0
    assert "data_label" not in labels[3]
    assert meta["claims"] == 4 and meta["pairs"] == 8 and len(word_nli.seen) == 8
    # data (0, 0, 1) vs NLI (0, 1, 1): accuracy 2/3; kappa: po 2/3, pe 2/3 * 1/3 + 1/3 * 2/3 = 4/9 -> (2/9) / (5/9)
    assert label_agreement([out]) == {"n": 3, "accuracy": pytest.approx(2 / 3), "kappa": pytest.approx(0.4),
                                      "labeller": "nli:nli:word-nli", "data0_labeller0": 1, "data0_labeller1": 1,
                                      "data1_labeller0": 0, "data1_labeller1": 1}
    # a rerun reads the pair cache of the cell folder: no pair is computed again
    word_nli.seen.clear()
    from haldet.models.pairs import cache as pair_cache

    pair_cache._MEMORY.clear()
    label_claims([inst], model="word-nli", k=2, sentences=2, cache=tmp_path)
    assert word_nli.seen == []
    # without reference text the claims keep their labels
    bare = inst.model_copy(update={"references": []})
    [same], _ = label_claims([bare], model="word-nli")
    assert [u.binary for u in same.units] == [0, 0, 1, None]


def test_knowledge_source_in_factscore_format_is_the_reference(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "factscore_bio")
    pages = tmp_path / "kb.jsonl"
    pages.write_text(json.dumps({"title": "Oren Dalby", "text": ["Oren Dalby is a pianist.", "He lives in Montreal."]})
                     + "\n")
    instances, _ = DATASETS.get("factscore_bio")(data_dir=tmp_path, knowledge=str(pages)).load()
    by_topic = {i.meta["topic"]: i for i in instances}
    assert by_topic["Oren Dalby"].references == ["Oren Dalby is a pianist.\n\nHe lives in Montreal."]
    assert by_topic["Marta Kessling"].references == []
    from haldet.errors import HaldetError

    pages.write_text("{\"name\": 1}\n")
    with pytest.raises(HaldetError, match="line 1 of the knowledge source"):
        DATASETS.get("factscore_bio")(data_dir=tmp_path, knowledge=str(pages)).load()


def test_claim_level_selfcheck_against_the_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    from haldet.schema import Generation
    from haldet.signals import Signal, SignalView
    from haldet.suites.longform import selfcheck_claims

    model = WordNLI()
    monkeypatch.setattr(selfcheck_claims, "pair_scores", lambda det, kind, param, pairs, label: model.compute(pairs))
    inst = _instance([("Ada Lovelace was born in London.", 0), ("Her father was Lord Tennyson.", 1)])
    samples = ["Ada Lovelace was born in London. Her father was Lord Byron.",  # entails 1st, neutral on 2nd
               "Ada Lovelace was never in London.",                          # contradicts both
               ""]                                                           # empty: left out
    gen = Generation(id=inst.id, prompt="p", response=inst.response or "", token_ids=[], token_logprobs=[],
                     finish_reason="provided", n_tokens=0, model="m")
    loaded = {Signal.SAMPLES: [samples, samples, None]}
    view = SignalView(ids=[inst.id, "d/test/b", "d/test/c"],
                      instances=[inst, inst.model_copy(update={"id": "d/test/b", "units": []}),
                                 inst.model_copy(update={"id": "d/test/c"})],
                      generations=[gen, gen, gen], loader=lambda signal, ids: loaded[signal])
    det = selfcheck_claims.SelfCheckClaims()
    units = det.score_units(view, "claim")
    # claim 1: samples give ratios 0.1/(0.1+0.8) and 0.8/(0.8+0.1); claim 2: neutral 0.1/(0.1+0.2), then 0.8/0.9
    assert units.values[0] == pytest.approx([(0.1 / 0.9 + 0.8 / 0.9) / 2, (1 / 3 + 0.8 / 0.9) / 2])
    assert len(units.values[1]) == 0 and np.isnan(units.values[2]).all() and units.reasons[2] == ["no samples"] * 2
    assert len(model.seen) == 4  # 2 claims x 2 non-empty samples, nothing for the item without samples
    flat = det.score(view)
    assert flat.values[0] == pytest.approx(np.mean(units.values[0]))
    # an answer without claim units is read sentence by sentence: its two sentences, as the two claims above
    assert flat.values[1] == pytest.approx(flat.values[0])
    assert flat.reasons[2] == "no samples"
