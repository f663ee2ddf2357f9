"""The sample-based detectors that existed before issue 43's shared evidence keep their scores: bit for bit, except
where an eigendecomposition makes them (EigV, ECC, KLE: LAPACK's kernels are chosen by the CPU's vector width, so
an AVX-512 machine rounds them differently from the one that recorded the values, by 1-3 ulp), which may differ by
at most 4 ulp. Every variant of semantic entropy, SelfCheck-NLI, lexical similarity, SelfCheckGPT n-gram, the
graph family, KLE and CoCoA on a fixed fixture (answers, repeated and empty samples, log-likelihoods) with a
deterministic NLI model (probabilities from a hash of the pair), against the values the code before the change produced
(tests/fixtures/sample_detectors_golden.json, float.hex; regenerate only for an intended change:
`PYTHONPATH=src python tests/detectors/test_detectors_golden_samples.py >
tests/fixtures/sample_detectors_golden.json`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from haldet.detectors import _consistency
from haldet.detectors.base import DETECTORS
from haldet.models.pairs.base import PairModel
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView

HERE = Path(__file__).resolve()  # (a script too, see above: so not tests/repo_paths.py)
FIXTURES = HERE.parents[1] / "fixtures"


class HashNLI(PairModel):
    """Entailment / neutral / contradiction probabilities from a hash of the pair: fixed, varied, no model."""

    kind, width = "nli", 3

    def __init__(self) -> None:
        super().__init__("hash", batch_size=4)
        self.id = "hash-nli"

    def compute(self, pairs: Any) -> np.ndarray:
        out = []
        for a, b in pairs:
            h = hashlib.sha256(json.dumps([a, b]).encode()).digest()
            v = np.array([h[0] + 1, h[1] + 1, h[2] + 1], dtype=np.float64)
            out.append(v / v.sum())
        return np.array(out)


def fixture() -> SignalView:
    answers = ["Paris is the capital. It is big.", "Lyon", "Rome, I think."]
    samples = [["Paris", "Paris is the capital", "Lyon", "Paris"], ["Lyon", "Marseille", ""],
               ["Rome", "Rome", "Milan", "Turin"]]
    ids = [f"g/test/{i}" for i in range(3)]
    inst = [Instance(id=ids[i], dataset="g", scenario="qa_open", task_type="short_answer", question=q)
            for i, q in enumerate(["What is the capital of France?", "Which city?", "Capital of Italy?"])]
    lps = [[-0.1, -0.5, -0.2, -0.05, -0.3, -0.7, -0.2], [-1.2], [-0.4, -0.9, -0.1]]
    gens = [Generation(id=ids[i], prompt="p", response=answers[i], token_ids=list(range(len(lps[i]))),
                       token_logprobs=lps[i], finish_reason="stop", n_tokens=len(lps[i]), model="m") for i in range(3)]
    sig = {Signal.RESPONSE: answers, Signal.SAMPLES: samples,
           Signal.SAMPLE_LOGLIKS: [np.array([[-1.0, 2], [-2.5, 4], [-3.0, 1], [-1.1, 2]]),
                                   np.array([[-0.5, 1], [-2.0, 3], [0.0, 0]]),
                                   np.array([[-0.2, 1], [-0.3, 1], [-1.5, 2], [-4.0, 2]])],
           Signal.ANSWER_ENTROPIES: [np.linspace(0.1, 1.0, 7), np.array([0.5]), np.array([0.2, 0.9, 0.4])]}

    def loader(signal: Signal, wanted: Any) -> list[Any]:
        return [sig[signal][int(i.rsplit("/", 1)[1])] for i in wanted]
    return SignalView(ids=ids, instances=inst, generations=gens, loader=loader)


CASES = [("semantic_entropy", {}), ("semantic_entropy", {"equivalence": "loose"}),
         ("selfcheck_nli", {}), ("selfcheck_nli", {"variant": "paper"}), ("lexical_similarity", {}),
         ("selfcheck_ngram", {}), ("selfcheck_ngram", {"variant": "avg"}),
         *[(n, {"variant": v}) for n in ("eigv", "ecc", "deg") for v in ("jaccard", "nli_entail", "nli_contra")],
         *[("num_sem_sets", {"variant": v}) for v in ("jaccard", "nli")],
         ("kle", {}), ("kle", {"variant": "jaccard"}), ("kle", {"include_question": True}),
         ("eigv", {"variant": "nli_entail", "include_question": True}),
         *[("cocoa", {"variant": v}) for v in ("msp", "ppl", "entropy")], ("cocoa", {"similarity": "jaccard"})]


def scores() -> dict[str, list[str]]:
    model = HashNLI()
    _consistency.load_pair_model = lambda kind, name, fallback=None, **kw: (  # type: ignore[assignment]
        model, {"requested": name, "used": model.id})
    v = fixture()
    out = {}
    for name, params in CASES:
        p = dict(params)
        if "nli_model" in DETECTORS.get(name).defaults:
            p.update(nli_model="hash", fallback=None)
        values = DETECTORS.get(name)(**p).score(v).values
        out[f"{name} {json.dumps(params, sort_keys=True)}"] = [float(x).hex() for x in values]
    return out


SPECTRAL = ("eigv ", "ecc ", "kle ")  # eigendecomposition-based scores: equal within MAX_ULP on any CPU
MAX_ULP = 4


def differences(got: dict[str, list[str]], expected: dict[str, list[str]]) -> list[str]:
    """Each case whose scores differ from the recorded ones: in any bit, or beyond MAX_ULP for a spectral one."""
    out = []
    for case in sorted(set(got) | set(expected)):
        if case not in got or case not in expected or len(got[case]) != len(expected[case]):
            out.append(f"{case}: {got.get(case)} != {expected.get(case)}")
            continue
        a = np.array([float.fromhex(x) for x in got[case]])
        b = np.array([float.fromhex(x) for x in expected[case]])
        if case.startswith(SPECTRAL):
            ulps = np.abs(a - b) / np.spacing(np.maximum(np.abs(a), np.abs(b)))
            same = np.isnan(a) == np.isnan(b)
            if not same.all() or np.nanmax(np.where(np.isnan(a), 0.0, ulps)) > MAX_ULP:
                out.append(f"{case}: {got[case]} != {expected[case]} (more than {MAX_ULP} ulp)")
        elif got[case] != expected[case]:
            out.append(f"{case}: {got[case]} != {expected[case]}")
    return out


def test_existing_sample_detectors_score_as_recorded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(_consistency, "load_pair_model", _consistency.load_pair_model)  # restored afterwards
    from haldet.detectors import _relations
    from haldet.models.pairs import cache

    monkeypatch.setattr(cache, "_MEMORY", {})
    _relations.clear_memory()
    expected = json.loads((FIXTURES / "sample_detectors_golden.json").read_text())
    got = scores()
    _relations.clear_memory()
    assert differences(got, expected) == []


def test_differences_sees_a_changed_bit_and_a_spectral_drift_beyond_its_ulps() -> None:
    """Negative controls of the comparison above: one ulp off a non-spectral score, 5 ulp off a spectral one."""
    exact, spectral = "lexical_similarity {}", 'kle {"variant": "jaccard"}'
    recorded = {exact: [(0.75).hex()], spectral: [(1.5).hex()]}
    assert differences(recorded, recorded) == []
    assert differences({**recorded, spectral: [np.nextafter(1.5, 2.0).hex()]}, recorded) == []
    assert differences({**recorded, exact: [np.nextafter(0.75, 1.0).hex()]}, recorded) != []
    assert differences({**recorded, spectral: [(1.5 + 5 * np.spacing(1.5)).hex()]}, recorded) != []


if __name__ == "__main__":
    print(json.dumps(scores(), indent=1))
