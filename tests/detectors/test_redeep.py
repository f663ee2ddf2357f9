"""ReDeEP: its two scores on a tiny randomly initialised Llama built here (known answers from the model's own
pass), the too-long and no-context reasons, and the head/layer choice of the detector on synthetic evidence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from haldet.signals import Signal
from haldet.testing.conformance import synthetic_view
from repo_paths import FIXTURES
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


def test_scores_on_the_embedded_smollm2() -> None:
    """The same known answer on the real embedded checkpoint (SmolLM2-135M: 30 layers, 9 query heads over 3
    key/value heads, BPE tokens): with every context token pooled, each head's ECS is the cosine of the mean context
    state with the answer states; each layer's PKS is a Jensen-Shannon divergence, in [0, ln 2]."""
    import math

    from haldet.backends.hf.backend import HFBackend

    smol = HFBackend("smollm2-135m", device="cpu")
    context = "Canberra is the capital of Australia. Sydney is its largest city."
    prompt = f"Context: {context}\nQuestion: What is the capital of Australia?\nAnswer:"
    answer = smol.encode_text(" The capital is Sydney.")
    x = smol.redeep_features(prompt, answer, context, top_ratio=1.0, max_tokens=256)
    assert x.shape == (30, 9 + 1)
    ids = smol.encode_prompt(prompt)
    enc = smol.tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)
    shift, a, b = len(ids) - len(enc["input_ids"]), prompt.index(context), prompt.index(context) + len(context)
    pos = [k + shift for k, (s, e) in enumerate(enc["offset_mapping"]) if e > s and s < b and e > a]
    with torch.no_grad():
        last = smol.model(input_ids=torch.tensor([ids + answer]), output_hidden_states=True).hidden_states[-1][0]
    pooled = last[pos[0] : pos[-1] + 1].float().mean(0)
    expected = torch.nn.functional.cosine_similarity(last[len(ids):].float(), pooled.unsqueeze(0), dim=-1).mean()
    assert np.allclose(x[:, :-1], float(expected), atol=1e-4)
    assert (x[:, -1] >= 0).all() and (x[:, -1] <= math.log(2) + 1e-6).all() and (x[:, -1] > 1e-4).any()
    n = len(ids) + len(answer)
    assert smol.redeep_features(prompt, answer, context, top_ratio=0.1, max_tokens=n - 1).startswith(
        f"{n} tokens exceed redeep.max_tokens = {n - 1}")


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


def test_redeep_through_a_whole_triviaplus_run(tmp_path, tiny_smol_llama) -> None:
    """`haldet run --suite triviaplus --data-file FIXTURE --detector redeep`: the items longer than
    redeep.max_tokens (here the articles over 5K characters; the paper's 14-22% unprocessable) are NaN with that
    reason, never a middle score; the rest are scored by a detector fitted on the processable training items; the
    Table 3 length strata show the coverage this leaves, and every row names what made it.

    The model is a tiny random Llama with the embedded SmolLM2's tokenizer and chat template (prompts and token
    counts as on SmolLM2): ReDeEP trains on at least 10 items and its logit lens costs ~3 s per item on SmolLM2
    itself (measured 73 s for this run), milliseconds here."""
    import json
    import math

    from typer.testing import CliRunner

    from haldet.cli import app
    from haldet.datasets.base import get_adapter
    from haldet.suites.triviaplus.protocol import length_stratum

    fixture = FIXTURES / "datasets" / "triviaplus" / "triviaplus_fixture.parquet"
    out, cfg = tmp_path / "run", tmp_path / "cfg.yaml"
    cfg.write_text("redeep: {max_tokens: 800}\nevaluation: {bootstrap: 20}\n")
    result = CliRunner().invoke(app, [
        "run", "--suite", "triviaplus", "--data-file", str(fixture), "--model", str(tiny_smol_llama),
        "--detector", "redeep", "--config", str(cfg), "--min-per-class", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output[-3000:]
    assert "read as triviaplus, the suite's own dataset" in " ".join(result.output.split())
    items, _ = get_adapter("triviaplus", fixture).load(limit=None)
    long_ids = {i.id for i in items if i.meta["context_chars"] > 5000}  # 5.5K-12K characters: > 800 tokens
    assert 0 < len(long_ids) < len(items)
    cell = next((out / "triviaplus").iterdir())
    evidence = {r["id"]: r for r in map(json.loads, (cell / "redeep.jsonl").open())}
    assert set(evidence) == {i.id for i in items}  # every split's items, training ones included
    assert {i for i, r in evidence.items() if r["scores"] is None} == long_ids
    assert all("exceed redeep.max_tokens = 800" in evidence[i]["invalid"] for i in long_ids)
    scores = [json.loads(line) for line in (cell / "scores" / "redeep@response@clean.jsonl").open()]
    assert {s["id"] for s in scores} == {i.id for i in items if i.split != "train"}
    nan = {s["id"] for s in scores if s["values"][0] is None}
    assert nan == long_ids & {s["id"] for s in scores}
    assert all("exceed redeep.max_tokens = 800" in s["reasons"][0] for s in scores if s["id"] in nan)
    assert all(isinstance(s["values"][0], float) and math.isfinite(s["values"][0]) and not s["reasons"][0]
               for s in scores if s["id"] not in nan)
    rows = [r for r in json.loads((out / "results.json").read_text()) if r["detector"] == "redeep"]
    test = [i for i in items if i.split == "test"]
    main = next(r for r in rows if r.get("table") is None and r["metric"] == "auroc")
    assert main["value"] is not None and main["n"] == sum(i.id not in long_ids for i in test)
    assert main["coverage"] == pytest.approx(main["n"] / len(test)) and main["coverage"] < 1
    # the identity of every number: the model it ran on, the detector's version, the stages that fed it, no stand-in
    assert main["model"] == str(tiny_smol_llama) and main["version"] == "1" and main["stages"] == "generate+redeep"
    assert main["substitute"] == "" and main["dataset"] == "triviaplus"
    strata = {r["stratum"]: r["value"] for r in rows
              if r.get("table") == "Table 3 / A.7" and r["dimension"] == "length" and r["metric"] == "coverage"}
    by_stratum: dict[str, list[bool]] = {}
    for i in test:
        by_stratum.setdefault(length_stratum(i.meta["context_chars"]), []).append(i.id not in long_ids)
    assert strata == {s: sum(ok) / len(ok) for s, ok in by_stratum.items()} and min(strata.values()) < 1
    md = (out / "suite_tables.md").read_text()
    assert "| redeep | length | long (>5K) | 3 | 0.000 |" in md
    assert "| redeep | length | medium (1K-5K) | 3 | 1.000 |" in md


def test_paper_variant_scores_unprocessable_items_with_the_default_and_says_so() -> None:
    """TRIVIA+ appendix A.8: responses too long for the attention pass get an uninformative default score and stay
    in the metrics; haldet's default variant keeps them NaN with the reason."""
    from haldet.detectors.redeep import ReDeEP

    train = synthetic_view({Signal.REDEEP_FEATURES}, n=60, seed=1)
    too_long = "the prompt and answer (5000 tokens) exceed redeep.max_tokens = 4096"
    scores = {}
    for variant in ("strict", "paper"):
        det = ReDeEP(variant=variant, top_heads=1, top_layers=1)
        det.fit(train, None)
        test = synthetic_view({Signal.REDEEP_FEATURES}, n=10, seed=2)
        test.get(Signal.REDEEP_FEATURES)[3] = too_long  # what the evidence pass stores for an item it cannot read
        scores[variant] = (det.score(test), det.meta)
    strict, _ = scores["strict"]
    assert np.isnan(strict.values[3]) and strict.reasons[3] == too_long
    paper, meta = scores["paper"]
    assert paper.values[3] == 0.0 and not np.isnan(paper.values).any()  # the training mean on the z-scale
    assert np.allclose(np.delete(paper.values, 3), np.delete(strict.values, 3))  # the other items are unchanged
    assert meta["defaulted"] == 1 and "strict variant's coverage would be at most 90%" in meta["note"]
