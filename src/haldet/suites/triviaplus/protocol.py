"""TRIVIA+'s protocol pieces (seed triviaplus.txt, sections 4.2.2, 5 and appendix A.7): label regimes, strata,
measured label noise and Fisher's exact test on thresholded outcomes.

Label regimes: supervised detectors train on the chosen regime's labels and are always evaluated on the clean
test labels; a second evaluation reads the noisy test labels (the paper's Table 5). The release says every noisy
column carries 15% noise: `label_disagreement` measures it instead of trusting the number.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import fisher_exact

from haldet.errors import HaldetError
from haldet.evaluation.thresholds import Confusion

CLEAN = "clean"
# regime -> release column holding its response-level binary label (1 = unfaithful)
REGIME_COLUMNS: dict[str, str] = {
    CLEAN: "response_level_label_binary",
    "ws": "response_level_label_binary_ws_llm_aaj",
    "dw": "response_level_label_binary_15pct_noise_dissenting_workers",
    "dl": "response_level_label_binary_15pct_noise_dissenting_label",
    "rf": "response_level_label_binary_15pct_noise_random_flipping",
}
REGIME_NAMES: dict[str, str] = {
    CLEAN: "clean (human majority, strictest sentence)",
    "ws": "weak supervision (LLM-as-a-judge)",
    "dw": "dissenting worker (15%)",
    "dl": "dissenting label (15%)",
    "rf": "random flipping (15%)",
}

# context length strata in characters of the article (paper Table 3 / Table 9)
LENGTH_STRATA: tuple[tuple[str, int, float], ...] = (
    ("short (<1K)", 0, 1_000), ("medium (1K-5K)", 1_000, 5_000), ("long (>5K)", 5_000, math.inf))
# the release's `source` values -> domain names of the paper (msmarco and ms_marco are one origin)
DOMAINS: dict[str, str] = {"drop": "DROP", "msmarco": "MS-MARCO", "ms_marco": "MS-MARCO", "nq": "NQ",
                           "trivia": "TriviaQA", "covid": "COVID"}


# label sets built here from the release's raw per-worker votes (`workerId` + `response-level-labels-bin`)
VOTE_REGIMES: dict[str, str] = {"dw_votes": "dissenting worker, built from the raw votes",
                                "dl_votes": "dissenting label, built from the raw votes",
                                "rf_votes": "random flipping, built here"}
REGIME_NAMES.update(VOTE_REGIMES)


def noisy_from_votes(clean: Mapping[str, int], votes: Mapping[str, Sequence[tuple[str, int]]], method: str,
                     rate: float, seed: int) -> tuple[dict[str, int], dict[str, object]]:
    """A noisy label set from the clean labels and each item's per-worker binary votes (the paper's section
    4.2.2, after Chong et al. 2022), seeded, and what was done:

    - `rf_votes`: flip `round(rate * n)` labels drawn uniformly (sample-independent noise);
    - `dl_votes`: among items where some worker voted against the final label, replace the final label by that
      dissenting label for `round(rate * n)` of them drawn at random (fewer if fewer items have a dissent);
    - `dw_votes`: workers in a seeded random order; each chosen worker's votes that disagree with the final labels
      are applied, worker after worker, until at least `round(rate * n)` labels differ (or no worker is left).
    """
    ids = sorted(clean)
    rng = random.Random(f"{seed}:{method}")
    target = round(rate * len(ids))
    flipped: set[str] = set()
    workers_used: list[str] = []
    if method == "rf_votes":
        flipped = set(rng.sample(ids, min(target, len(ids))))
    elif method == "dl_votes":
        dissent = [i for i in ids if any(v != clean[i] for _, v in votes.get(i, ()))]
        flipped = set(rng.sample(dissent, min(target, len(dissent))))
    elif method == "dw_votes":
        workers = sorted({w for i in ids for w, _ in votes.get(i, ())})
        rng.shuffle(workers)
        for worker in workers:
            if len(flipped) >= target:
                break
            workers_used.append(worker)
            flipped |= {i for i in ids if any(w == worker and v != clean[i] for w, v in votes.get(i, ()))}
    else:
        raise HaldetError(f"unknown vote-noise method {method!r}", where="suite_params.triviaplus.vote_noise",
                          hint=f"one of {', '.join(VOTE_REGIMES)}")
    labels = {i: 1 - clean[i] if i in flipped else clean[i] for i in ids}
    record: dict[str, object] = {"method": method, "rate": rate, "seed": seed, "n": len(ids), "target": target,
                                 "flipped": len(flipped), "achieved": len(flipped) / len(ids) if ids else None}
    if method == "dw_votes":
        record["workers"] = workers_used
    return labels, record


def length_stratum(n_chars: int) -> str:
    return next(name for name, lo, hi in LENGTH_STRATA if lo <= n_chars < hi)


def domain_of(source: str) -> str:
    """The paper's domain name for a release `source` value; an unknown source keeps its own name."""
    return DOMAINS.get(source.strip().lower(), source)


def check_regime(regime: str, where: str = "suite_params.triviaplus.train_labels") -> str:
    if regime not in REGIME_COLUMNS and regime not in VOTE_REGIMES:
        known = "; ".join(f"{k}: {v}" for k, v in REGIME_NAMES.items())
        raise HaldetError(f"unknown TRIVIA+ label regime {regime!r}", where=where, hint=f"one of {known}")
    return regime


def label_disagreement(labels: Mapping[str, Mapping[str, int]], splits: Mapping[str, str]) -> list[dict[str, object]]:
    """Per noisy regime and split (and `all`): items with both labels, how many differ from the clean label,
    the share, and the direction (clean 0 -> noisy 1, clean 1 -> noisy 0).

    `labels[regime][item id]` is the binary label; `splits[item id]` the release split of the item.
    """
    clean = labels[CLEAN]
    rows: list[dict[str, object]] = []
    for regime, noisy in labels.items():
        if regime == CLEAN:
            continue
        for split in (*sorted(set(splits.values())), "all"):
            ids = [i for i in clean if i in noisy and (split == "all" or splits.get(i) == split)]
            up = sum(1 for i in ids if clean[i] == 0 and noisy[i] == 1)
            down = sum(1 for i in ids if clean[i] == 1 and noisy[i] == 0)
            rows.append({"regime": regime, "split": split, "n": len(ids), "disagree": up + down,
                         "share": (up + down) / len(ids) if ids else None, "clean0_noisy1": up,
                         "clean1_noisy0": down})
    return rows


@dataclass(frozen=True)
class StratumOutcome:
    """Thresholded outcomes of one detector within one stratum, and Fisher's exact test of its share of correct
    predictions against all other strata together (two-sided)."""

    dimension: str
    stratum: str
    confusion: Confusion
    p_vs_rest: float | None

    def row(self) -> dict[str, object]:
        c = self.confusion
        return {"dimension": self.dimension, "stratum": self.stratum, **c.metrics(),
                "n_pos": c.tp + c.fn, "fisher_p_vs_rest": self.p_vs_rest}


def strata_outcomes(y: np.ndarray, pred: np.ndarray, strata: Mapping[str, Sequence[str]]) -> list[StratumOutcome]:
    """Per dimension (length, domain, generator, ...) and stratum: the confusion of the thresholded predictions
    and Fisher's exact test on the 2x2 table (correct, wrong) x (this stratum, the rest).

    `strata[dimension][i]` is item i's stratum. A stratum holding every item has no "rest": its p is None.
    """
    y, pred = np.asarray(y, dtype=bool), np.asarray(pred, dtype=bool)
    right = y == pred
    out = []
    for dimension, names in strata.items():
        names_arr = np.asarray(names, dtype=object)
        for name in sorted(set(names)):
            inside = names_arr == name
            p = None
            if (~inside).any():
                table = [[int(right[inside].sum()), int((~right[inside]).sum())],
                         [int(right[~inside].sum()), int((~right[~inside]).sum())]]
                p = float(fisher_exact(table)[1])
            out.append(StratumOutcome(dimension, name, Confusion.of(y[inside], pred[inside]), p))
    return out


def detection_rate_test(pred: np.ndarray, kinds: Sequence[str], a: str, b: str) -> dict[str, object]:
    """The paper's Table 11 test: among hallucinated items of kind `a` and of kind `b` (e.g. contradicted vs not
    mentioned), the share predicted positive in each, and Fisher's exact p of (detected, missed) x (a, b)."""
    pred = np.asarray(pred, dtype=bool)
    kinds_arr = np.asarray(kinds, dtype=object)
    counts = {k: (int(pred[kinds_arr == k].sum()), int((~pred[kinds_arr == k]).sum())) for k in (a, b)}
    rates = {k: (hit / (hit + miss) if hit + miss else None) for k, (hit, miss) in counts.items()}
    p = None
    if all(sum(v) for v in counts.values()):
        p = float(fisher_exact([list(counts[a]), list(counts[b])])[1])
    return {"kinds": [a, b], "n": {k: sum(v) for k, v in counts.items()}, "detection_rate": rates, "fisher_p": p}
