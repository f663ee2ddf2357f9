"""HalluLens (Bang et al., 2025) as suites: detectors evaluated on the answers `haldet hallulens evaluate` judged.

HalluLens itself measures models (rates; `haldet hallulens build|evaluate`, this folder's other modules).
These suites turn its judged answers into detection benchmarks: the answers are given text, teacher-forced
through `--model` (use the model that wrote them, so white-box evidence is its own), labelled by the HalluLens
judges. `hallulens`: PreciseWikiQA and NonExistentRefusal at response level; `hallulens_longwiki`: LongWiki at
response and claim level. Point `--data-dir` at `OUT/<model>/detection`.
"""

from __future__ import annotations

from haldet.suites.base import Suite, TableLayout, register

METRICS = ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt")
RATES = ("Table 2 (false refusal, hallucination and correct rates; false acceptance rate; mean ± sd over trials)",
         "Fig. 4 (PreciseWikiQA rates per h-score decile)",
         "Fig. 9 (GeneratedEntities false acceptance per place-frequency group; sets built with --places)",
         "Kendall's tau-b between the models' rankings on two tasks (3 or more models)")
OUTPUTS = tuple((t, "`haldet hallulens evaluate`: OUT/table.md, OUT/report.html") for t in RATES)


@register("hallulens")
class HalluLensSuite(Suite):
    title = "HalluLens: detection on PreciseWikiQA and NonExistentRefusal answers"
    paper = "HalluLens: LLM Hallucination Benchmark (Bang et al., 2025)"
    description = ("Answers judged by `haldet hallulens evaluate` (--data-dir OUT/<model>/detection); "
                   "refusing a non-existent entity is correct, accepting it a hallucination.")
    datasets = ("hallulens_precisewikiqa", "hallulens_nonexistent")
    answer_source = "provided"
    levels = ("response",)
    detectors = ("perplexity", "likelihood", "entropy")
    tables = (TableLayout("Response level", metrics=METRICS),)
    outputs = OUTPUTS


@register("hallulens_longwiki")
class HalluLensLongWikiSuite(Suite):
    title = "HalluLens LongWiki: detection on long answers, per response and per claim"
    paper = "HalluLens: LLM Hallucination Benchmark (Bang et al., 2025)"
    description = ("LongWiki answers judged by `haldet hallulens evaluate`; each claim located inside the "
                   "sentence it was extracted from. The same answers run through the longform flow (extracted "
                   "claims, other label sources, response rows from claims): haldet run --dataset "
                   "hallulens_longwiki --level claim.")
    datasets = ("hallulens_longwiki",)
    answer_source = "provided"
    levels = ("response", "claim")
    detectors = ("likelihood", "entropy")
    tables = (TableLayout("Response level", metrics=METRICS, level="response"),
              TableLayout("Claim level", metrics=METRICS, level="claim"))
    outputs = OUTPUTS
