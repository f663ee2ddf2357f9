"""A synthetic run directory with known contents, written through the store API: what the explorer's tests and
benchmark read (any number of items and detectors, no model needed).

Item i of `synth_qa` x `synth-model`: label hallucination when i % 3 == 0 (else correct); split val when i % 5 == 0,
train when i % 5 == 1, else test; detector `det<k>` scores `label + 0.1 * k + noise` under the manifest's key, NaN
with reason "no answer tokens" for every 50th item, plus a newer record for item 3 under another key (other settings)
that readers must ignore. Written in the current run format: the manifest names each detector's score log (and that
it does not train), and the cell records the keys of its labels and evidence records (`keys.json`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from haldet.evaluation.metrics import auroc
from haldet.store import RUN_FORMAT, RunStore, ScoreLog

DATASET, MODEL = "synth_qa", "synth-model"
NAN_REASON = "no answer tokens"
BATCH = 5000


def item_id(i: int) -> str:
    return f"{DATASET}/test/{i}"


def label_of(i: int) -> int:
    return int(i % 3 == 0)


def split_of(i: int) -> str:
    return {0: "val", 1: "train"}.get(i % 5, "test")


def score_of(k: int, i: int, rng_noise: float) -> float:
    return math.nan if i % 50 == 49 else label_of(i) + 0.1 * k + rng_noise


def write_synthetic_run(root: Path, n_items: int = 60, n_detectors: int = 3, seed: int = 0,
                        names: Sequence[str] = ()) -> dict[str, Any]:
    """Write the run; returns {"labels", "splits", "scores": {detector: array}} as written (NaN where invalid).
    `names`: the detectors' names (default det0, det1, ...; given names set their number)."""
    rng = np.random.default_rng(seed)
    store = RunStore(root)
    cell = store.cell(DATASET, MODEL)
    ids = [item_id(i) for i in range(n_items)]
    for lo in range(0, n_items, BATCH):
        part = range(lo, min(n_items, lo + BATCH))
        cell.log("generate").append(
            {"id": ids[i], "key": "g", "prompt": f"<|im_start|>user\nContext: a synthetic note.\nQuestion: What is "
                                                 f"fact number {i}?<|im_end|>\n<|im_start|>assistant\n",
             "response": f"Fact {i} is {'wrong' if label_of(i) else 'right'}.", "token_ids": [1, 2, 3],
             "token_logprobs": [-0.5, -1.0, -0.25], "finish_reason": "stop", "n_tokens": 3, "model": MODEL,
             "seconds": 0.01, "token_text": None, "provided": False} for i in part)
        cell.log("annotate").append(
            {"id": ids[i], "key": "a", "category": "hallucination" if label_of(i) else "correct",
             "judge": "rule:short_answer", "reasoning": f"reasoning for item {i}", "spans": []} for i in part)
        cell.log("sample").append({"id": ids[i], "key": "s", "samples": [f"sample {j} of item {i}" for j in range(3)]}
                                  for i in part)
        cell.log("auxiliary").append({"id": ids[i], "key": "x", "verbalized": f"Confidence {i % 10}",
                                      "verbalized_value": (i % 10) / 10, "self_eval_text": None, "p_true": None}
                                     for i in part)
    cell.record_stage_keys({stage: dict.fromkeys(ids, key) for stage, key in  # the labels and evidence the run used
                            (("annotate", "a"), ("generate", "g"), ("sample", "s"), ("auxiliary", "x"))})
    splits = {s: [ids[i] for i in range(n_items) if split_of(i) == s] for s in ("train", "val", "test")}
    cell.write_json("split.json", {"seed": seed, "fractions": [0.2, 0.2, 0.6], **splits})
    labels = np.array([label_of(i) for i in range(n_items)])
    scores: dict[str, np.ndarray] = {}
    detectors, rows = [], []
    test = np.array([split_of(i) == "test" for i in range(n_items)])
    for k in range(len(names) or n_detectors):
        name = names[k] if names else f"det{k}"
        values = np.array([score_of(k, i, float(rng.normal(0, 0.6))) for i in range(n_items)])
        scores[name] = values
        score_log = ScoreLog(name)
        log = cell.log(score_log.name)
        log.append({"id": ids[i], "key": f"key{k}", "value": None if math.isnan(v) else float(v),
                    "reason": NAN_REASON if math.isnan(v) else ""} for i, v in enumerate(values))
        log.append([{"id": ids[3], "key": "stale", "value": 999.0, "reason": ""}])  # newer, other settings
        detectors.append({"name": name, "family": "gray", "level": "response", "key": f"key{k}", "error": "",
                          "log": score_log.path, "trains": False})
        ok = test & np.isfinite(values)
        rows.append({"dataset": DATASET, "scenario": "qa_open", "model": MODEL, "detector": name, "family": "gray",
                     "metric": "auroc", "level": "response", "value": auroc(labels[ok], values[ok]),
                     "ci_low": None, "ci_high": None, "n": int(ok.sum()), "n_pos": int(labels[ok].sum()),
                     "coverage": float(ok.sum() / test.sum())})
    store.write_manifest({"run_format": RUN_FORMAT, "status": "done",
                          "config": {"datasets": [DATASET], "models": [MODEL], "limit": n_items},
                          "cells": [{"dataset": DATASET, "model": MODEL, "scenario": "qa_open", "error": "",
                                     "labels": {"hallucination": int(labels.sum()),
                                                "correct": int(n_items - labels.sum())},
                                     "detectors": detectors}]})
    store.write_results(rows)
    return {"labels": labels, "splits": splits, "scores": scores, "ids": ids}
