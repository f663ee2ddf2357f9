"""The real pair-model backends: HF NLI (a tiny local model built here), the LLM-prompted NLI on the embedded
model, BERTScore and bi-encoder similarity on the packaged MiniLM, the offline fallback, the pair cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from haldet.models.pairs import cache, embeddings, loader, similarity
from haldet.models.pairs.base import NLI_COLUMNS, PairModel
from haldet.models.pairs.cache import PairCache
from haldet.models.pairs.loader import load_pair_model

PAIRS = [("Paris is the capital of France.", "Paris is in France."),
         ("The cat sat on the mat.", "A dog ran in the park and barked loudly at the mailman."),
         ("Water boils at 100 degrees Celsius at sea level.", "Water is cold.")]


@pytest.fixture(scope="module")
def tiny_nli(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer BERT NLI classifier, its labels in the reverse of MNLI's order (the columns
    must be read by name)."""
    from tiny_llama import build_tiny_nli

    return build_tiny_nli(tmp_path_factory.mktemp("tiny-nli"), labels=("CONTRADICTION", "NEUTRAL", "ENTAILMENT"))


def test_hf_nli_columns_follow_id2label(tiny_nli: Path) -> None:
    import torch

    model, meta = load_pair_model("nli", str(tiny_nli), batch_size=2)
    assert meta["requested"] == meta["loaded"] == str(tiny_nli)
    assert meta["used"].startswith(f"hf-nli:{tiny_nli}@dir:") and meta["used"].endswith(":ml512")
    out = np.concatenate([model.compute(PAIRS[:2]), model.compute(PAIRS[2:])])
    assert out.shape == (3, 3) and np.allclose(out.sum(1), 1)
    # by hand, one pair at a time: model label order is (contradiction, neutral, entailment)
    for row, (a, b) in enumerate(PAIRS):
        enc = model.tokenizer(a, b, return_tensors="pt")
        with torch.inference_mode():
            p = torch.softmax(model.model(**enc).logits, -1)[0].numpy()
        assert out[row] == pytest.approx([p[2], p[1], p[0]], abs=1e-5)   # batched with padding == alone
    assert NLI_COLUMNS == ("entailment", "neutral", "contradiction")


def test_offline_default_falls_back_and_says_so(tiny_nli: Path, caplog) -> None:
    missing = str(tiny_nli.parent / "no-such-model")
    with caplog.at_level("WARNING", logger="haldet"):
        _model, meta = load_pair_model("nli", missing, fallback=str(tiny_nli))
    assert meta["used"].startswith(f"hf-nli:{tiny_nli}@") and meta["requested"] == missing and meta["fallback_reason"]
    assert meta["loaded"] == str(tiny_nli)
    assert f"{str(tiny_nli)!r} runs instead" in caplog.text  # said once, naming what runs
    with pytest.raises(Exception, match="cannot load NLI model"):
        load_pair_model("nli", missing)


class Counting(PairModel):
    kind, width = "similarity", 1

    def __init__(self, tag: str) -> None:
        super().__init__(tag, batch_size=2)
        self.calls: list[tuple[str, str]] = []

    def compute(self, pairs):  # type: ignore[no-untyped-def]
        self.calls += list(pairs)
        return np.array([[len(a) / (len(a) + len(b))] for a, b in pairs])


def test_pair_cache_dedupes_and_persists(tmp_path: Path) -> None:
    model = Counting("count-a")
    pairs = [("a", "bb"), ("ccc", "d"), ("a", "bb"), ("a", "bb")]
    out = PairCache(tmp_path).scores(model, pairs)
    assert model.calls == [("a", "bb"), ("ccc", "d")] or sorted(model.calls) == sorted({("a", "bb"), ("ccc", "d")})
    assert len(model.calls) == 2
    assert out[:, 0] == pytest.approx([1 / 3, 3 / 4, 1 / 3, 1 / 3])
    cache._MEMORY.clear()   # a new process: the values come back from <cell>/pairs/<model>.jsonl
    again = Counting("count-a")
    assert PairCache(tmp_path).scores(again, pairs)[:, 0] == pytest.approx(out[:, 0], abs=1e-6)
    assert again.calls == []
    assert (tmp_path / "pairs").is_dir()


@pytest.fixture(scope="module")
def llm_nli():
    model, _meta = load_pair_model("nli", "llm:smollm2-135m", batch_size=4)
    return model


def test_llm_nli_distribution_and_batching(llm_nli) -> None:
    batched = llm_nli.compute(PAIRS)
    assert batched.shape == (3, 3) and np.allclose(batched.sum(1), 1) and np.all(batched > 0)
    single = np.concatenate([llm_nli.compute([p]) for p in PAIRS])
    assert batched == pytest.approx(single, abs=2e-3)    # left padding with position ids: same numbers
    assert llm_nli.id.startswith("llm-nli:smollm2-135m@gguf:")


def test_bertscore_minilm() -> None:
    model, meta = load_pair_model("bertscore", "minilm")
    assert meta["used"].startswith("bertscore:minilm:L6@dir:")
    out = model.compute([("Paris is the capital.", "Paris is the capital."), ("Paris is the capital.", "Dogs bark.")])
    assert out[0, 2] == pytest.approx(1.0, abs=1e-4) and out[1, 2] < out[0, 2]


def test_bi_encoder_similarity() -> None:
    model, _ = load_pair_model("similarity", "minilm")
    out = model.compute([("The capital is Paris.", "The capital is Paris."), ("The capital is Paris.", "I like dogs.")])
    assert out[0, 0] == pytest.approx(1.0, abs=1e-4) and 0 <= out[1, 0] < 0.5


def test_bi_encoder_embeds_each_text_once_across_pair_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """SAR asks every ordered pair of an item's samples: the pair cache batches them, and each distinct text is
    embedded once (not once per batch it appears in), with the same cosines as embedding the pair alone."""
    loader._LOADED.clear()   # a fresh model instance, and no embeddings kept from other tests
    embeddings.clear_memory()
    model, _ = load_pair_model("similarity", "minilm", batch_size=2)
    encoded: list[str] = []
    encode = model.model.encode

    def counting(texts, **kw):  # type: ignore[no-untyped-def]
        encoded.extend(texts)
        return encode(texts, **kw)

    monkeypatch.setattr(model.model, "encode", counting)
    texts = ["The capital is Paris.", "Paris is the capital of France.", "I like dogs.", "Berlin, I think."]
    pairs = [(a, b) for a in texts for b in texts if a != b]   # 12 pairs in batches of 2
    out = PairCache(None).scores(model, pairs)
    assert sorted(encoded) == sorted(texts)
    for (a, b), value in zip(pairs, out[:, 0], strict=True):
        alone = encode([a, b], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        assert value == pytest.approx(max(0.0, float(alone[0] @ alone[1])), abs=1e-6)
    loader._LOADED.clear()


def test_bertscore_embeds_each_sentence_once_across_many_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """SelfCheck-BERTScore matches each answer sentence with every sample sentence: pairs go to bert-score in calls
    of up to 1,024 (not one call per 64-pair batch), so a sentence shared by many pairs is embedded once."""
    import bert_score.utils

    model, _ = load_pair_model("bertscore", "minilm")
    embedded: list[str] = []
    embed = bert_score.utils.get_bert_embedding

    def counting(sentences, *args, **kw):  # type: ignore[no-untyped-def]
        embedded.extend(sentences)
        return embed(sentences, *args, **kw)

    monkeypatch.setattr(bert_score.utils, "get_bert_embedding", counting)
    answer = "Paris is the capital of France."
    pairs = [(answer, f"Sample sentence number {i}.") for i in range(model.batch_size + 6)]
    out = PairCache(None).scores(model, pairs)
    assert sorted(embedded) == sorted({t for p in pairs for t in p})
    alone = model.compute(pairs[:1])
    assert out[0] == pytest.approx(alone[0], abs=1e-6)


def test_bi_encoder_keeps_a_bounded_number_of_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long multi-cell process does not keep every text's embedding: past the bound the kept ones are dropped
    (and a batch that needs some of them embeds them again)."""
    model, _ = load_pair_model("similarity", "minilm")
    monkeypatch.setattr(similarity, "MAX_KEPT_EMBEDDINGS", 3)
    model.embeddings.clear()
    first = model.compute([("one", "two")])
    model.compute([("three", "four")])   # 2 kept + 2 new > 3: dropped
    assert set(model.embeddings) == {"three", "four"}
    out = model.compute([("one", "three"), ("five", "two")])   # needs a kept one and new ones: all embedded
    assert set(model.embeddings) == {"one", "two", "three", "five"} and out.shape == (2, 1)
    assert model.compute([("one", "two")]) == pytest.approx(first, abs=1e-6)
    model.embeddings.clear()


def test_llm_support_is_yes_over_yes_and_no(llm_nli) -> None:
    """The MiniCheck-style causal-LM checker (`llm:<model>`, kind "support") on the embedded model: P(Yes)
    renormalised over Yes/No after its prompt, equal to the next-token distribution computed directly."""
    import torch

    from haldet.models.pairs.support import SUPPORT_PROMPT, LLMSupport

    checker = object.__new__(LLMSupport)  # the already loaded backend, no second load
    checker.backend, checker.max_length, checker.name = llm_nli.backend, 1024, "smollm2-135m"
    checker.candidates = checker._candidate_ids()
    out = checker.compute(PAIRS)
    assert out.shape == (len(PAIRS), 1) and np.all((out > 0) & (out < 1))
    be = llm_nli.backend
    premise, hypothesis = PAIRS[0]
    ids = be.encode_prompt(be.render_chat([{"role": "user", "content": SUPPORT_PROMPT.format(
        premise=premise, hypothesis=hypothesis)}]))
    with torch.inference_mode():
        logp = torch.log_softmax(be.model(input_ids=torch.tensor([ids], device=be.device)).logits[0, -1].float(), -1)
    yes, no = (torch.logsumexp(logp[c], -1) for c in checker.candidates)
    assert out[0, 0] == pytest.approx(float(torch.sigmoid(yes - no)), abs=2e-3)
