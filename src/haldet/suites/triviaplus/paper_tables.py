"""TRIVIA+ Table 2 (the data's context lengths) and Table 13 (ReDeEP's self-detect setting) as tidy rows.

Table 2, per dataset of the suite and over all items of the cell and its test items: the article's length in
characters as released (median, mean, max: `meta["context_chars"]`, before any fitting to a window), the number of
items, the share hallucinated (clean labels, labelled items only), the number of generating LLMs, and the domains
(in the row's note).

Table 13: the paper scores RAGTruth responses with a LLaMA-2 backbone twice, once on the responses that same model
wrote (*self-detect*) and once on all of them. Here every response-level detector of the run gets both lines on
the test items: `responses` "self-detect (GENERATOR)", the items written by the generator that is the cell's
proxy model (`self_generator` of the suite's options; when unset, the generator whose name matches the model's:
lower case, the last path part, without "-hf"), and "all". AUROC, and F1 / precision / recall at the threshold
with the best F1 on the same items' validation part (`tune_on` val) and, as the paper's convention, on the
evaluated items themselves (`tune_on` test).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from haldet.schema import Instance
from haldet.suites.base import DATA
from haldet.suites.triviaplus.analysis import DetectorScores, label_of, main_row
from haldet.suites.triviaplus.protocol import CLEAN

T2, T13 = "Table 2", "Table 13"
T2_METRICS = ("context_median", "context_mean", "context_max", "n_items", "hallucinated_share", "n_llms")
T13_METRICS = ("auroc", "f1", "precision", "recall")
PROXY = "proxy_model"  # meta key: the model that teacher-forced the item (set when the suite prepares the items)


def context_chars(instance: Instance) -> int:
    return int(instance.meta.get("context_chars", len(instance.context or "")))


def table2(instances: Sequence[Instance], split: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """Table 2 rows (detector "(data)", `split` all / test)."""
    rows: list[dict[str, Any]] = []
    test = set(split.get("test") or [])
    for part, chosen in (("all", list(instances)), ("test", [i for i in instances if i.id in test])):
        if not chosen:
            continue
        lengths = [context_chars(i) for i in chosen]
        labels = [y for i in chosen if (y := label_of(i, CLEAN)) is not None]
        domains = sorted({str(i.meta.get("domain", "?")) for i in chosen})
        values: dict[str, float | int | None] = {
            "context_median": float(statistics.median(lengths)), "context_mean": statistics.fmean(lengths),
            "context_max": max(lengths), "n_items": len(chosen),
            "hallucinated_share": sum(labels) / len(labels) if labels else None,
            "n_llms": len({str(i.meta.get("generator", "?")) for i in chosen})}
        rows += [{"detector": DATA, "level": "response", "table": T2, "split": part, "metric": m, "value": v,
                  "ci_low": None, "ci_high": None, "n": len(chosen), "n_pos": sum(labels),
                  "note": "domains: " + ", ".join(domains)} for m, v in values.items()]
    return rows


def model_key(name: str) -> str:
    """A model or generator name compared loosely: lower case, the last path part, without "-hf"."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    return key.removesuffix("-hf")


def self_generator(instances: Sequence[Instance], wanted: str | None) -> tuple[str | None, str]:
    """The generator whose responses the cell's proxy model wrote, and why none when there is none."""
    generators = sorted({str(i.meta.get("generator", "")) for i in instances})
    if wanted:
        return (wanted, "") if wanted in generators else (
            None, f"self_generator {wanted!r} wrote none of these responses (generators: {', '.join(generators)})")
    model = next((str(i.meta[PROXY]) for i in instances if i.meta.get(PROXY)), "")
    found = [g for g in generators if model and model_key(g) == model_key(model)]
    if found:
        return found[0], ""
    return None, (f"no generator matches the proxy model {model or '(unknown)'} (generators: "
                  f"{', '.join(generators)}); name it with suite_params.triviaplus.self_generator")


def table13(detectors: Sequence[DetectorScores], items: Mapping[str, Instance], generator: str | None,
            why: str) -> list[dict[str, Any]]:
    """Table 13 rows per detector: self-detect and all, each with the threshold tuned on val and on test."""
    rows: list[dict[str, Any]] = []
    for ds in detectors:
        subsets = [(f"self-detect ({generator or 'none'})",
                    None if generator is None else {i for i, inst in items.items()
                                                    if inst.meta.get("generator") == generator}),
                   ("all", set(items))]
        for responses, ids in subsets:
            for tune_on in ("val", "test"):
                base = {"detector": ds.detector, "level": "response", "table": T13, "responses": responses,
                        "tune_on": tune_on, "ci_low": None, "ci_high": None}
                if ids is None:
                    rows += [{**base, "metric": m, "value": None, "n": 0, "note": why} for m in T13_METRICS]
                    continue
                sub = DetectorScores(ds.detector, {i: v for i, v in ds.val.items() if i in ids},
                                     {i: v for i, v in ds.test.items() if i in ids}, ds.train_labels)
                found = main_row(sub, items, tune_on=tune_on)
                rows += [{**base, "metric": m, "value": found.get(m), "n": found["n"], "n_pos": found["n_pos"],
                          "coverage": found["coverage"], "threshold": found.get("threshold"),
                          "note": str(found.get("note") or "")} for m in T13_METRICS]
    return rows
