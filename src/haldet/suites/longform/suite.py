"""The `longform` suite: long answers scored claim by claim, and per answer from their claims.

Protocol: the answers ship with the data (FActScore's biographies; HalluLens LongWiki's judged answers, the
`hallulens_longwiki` detection rows) and are teacher-forced through the proxy model (the generate stage's one token
pass); labels are the data's own, per claim (FActScore's annotators, HalluLens's verifier), or a labeller's. The
token-score detectors (likelihood, entropy, CCP, Focus, unit_sar, ...) score each claim by aggregating over the
tokens its span overlaps (`UnitDetector`), at level `claim`; at level `response` over the whole answer. The
`response from claims` table adds, for each claim-level detector, the answer's score from its claims (worst claim,
share of suspect claims; `from_claims`). Nothing is fitted by the default detectors, so every item is a test item;
a trained detector gets a seeded 60/20/20 item split (never of claims), as the `responses` suite does. Levels:
`suite_params.longform.levels` or `haldet run --level claim`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from haldet.config import digest
from haldet.errors import HaldetError
from haldet.evaluation.metrics import METRICS, MetricValue, evaluate
from haldet.evaluation.units import UnitData, unit_metrics
from haldet.models.passages import passage_index
from haldet.schema import Instance
from haldet.stages.claims import ClaimsStage, claim_units_of
from haldet.suites.base import DATA, Suite, TableLayout, register, split_if_trained
from haldet.suites.longform.agreement import LABELS, agreement_rows, read_hand_labels, with_hand_labels
from haldet.suites.longform.from_claims import FROM_CLAIMS, from_claims_rows
from haldet.suites.longform.nli_labels import label_claims
from haldet.suites.longform.verify_labels import pages_of, verifier_client, verify_claims

CLAIM_METRICS = ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt")
UNITS = "units"  # the cell log of the units each answer was scored with
GENERATED = ("bio_entities",)  # datasets whose answers the run's model writes
EXTRACTION = "extraction"  # an answer's claims-stage outcome (instance meta) and the `table` of its counts


def record_units(ctx: Any, items: list[Any]) -> None:
    """The units each answer was scored with (claims with their labels, label sources and evidence) in the cell's
    `units.jsonl`, for readers of the run (the explorer's per-claim view); a record already there is not repeated, and
    the keys used go to `keys.json`, so a later run's other units for the same answer are not shown for this one."""
    log = ctx.store.log(UNITS)
    recs = {item.id: {"id": item.id, "question": item.instance.question, "response": item.instance.response,
                      "units": [u.model_dump(mode="json") for u in item.instance.units]} for item in items}
    keys = {i: digest([r["response"], r["units"]]) for i, r in recs.items()}
    with ctx.store.lock(UNITS):
        have = log.read(keys)
        log.append([{**r, "key": keys[i]} for i, r in recs.items() if i not in have])
    ctx.store.record_stage_keys({UNITS: {i: [k] for i, k in keys.items()}})  # readers show these units, no others


def extraction_rows(instances: list[Instance]) -> list[dict[str, Any]]:
    """What the claims stage gave the cell's answers: claims kept, claims that mapped to no span (listed in
    `claims.jsonl`, never kept), answers whose extraction failed (listed in `claims.failed.jsonl`)."""
    outcomes = [i.meta[EXTRACTION] for i in instances if EXTRACTION in i.meta]
    done = [o for o in outcomes if not o.get("failed")]
    kept = sum(o["claims"] for o in done)
    unmapped = sum(len(o["unmapped"]) for o in done)
    counts = {"answers": len(outcomes), "answers_failed": len(outcomes) - len(done), "claims_kept": kept,
              "claims_unmapped": unmapped,
              "unmapped_share": unmapped / (kept + unmapped) if kept + unmapped else None}
    base = {"detector": DATA, "level": "claim", "table": EXTRACTION,
            "extractor": ", ".join(sorted({str(o["extractor"]) for o in done}))}
    return [{**base, "metric": name, "value": value, "n": len(outcomes),
             "note": "" if value is not None else "no claim extracted"} for name, value in counts.items()]


@register("longform")
class LongformSuite(Suite):
    title = "Long answers: claim-level detection"
    paper = "FActScore (Min et al., 2023); HalluLens LongWiki (Bang et al., 2025); docs/longform.md"
    description = ("Long answers (FActScore's given biographies, HalluLens LongWiki's judged answers, or your "
                   "model's biographies from an entity list) with labelled atomic claims; token scores aggregated "
                   "per claim, and per answer from its claims.")
    datasets = ("factscore_bio", "bio_entities", "hallulens_longwiki")
    levels = ("claim", "response")
    detectors = ("likelihood", "entropy", "ccp")
    # run only when named: K samples per answer and NLI pairs (selfcheck_claims, luq), one prompt per claim
    optional = ("selfcheck_claims", "luq", "p_true_claims")
    tables = (TableLayout("Claim level (pooled claims; threshold from validation when there is one)",
                          metrics=CLAIM_METRICS, level="claim"),
              TableLayout("Response level (token scores over the whole answer)", metrics=METRICS, level="response"),
              TableLayout("Response level from claims (worst claim; share of suspect claims)", table=FROM_CLAIMS,
                          level="response", line=("detector", "aggregate"),
                          metrics=("auroc", "aupr", "spearman_unsupported_share")),
              TableLayout("Claims extracted (claims: extract)", table=EXTRACTION, level="claim", line=("detector",),
                          metrics=("answers", "answers_failed", "claims_kept", "claims_unmapped", "unmapped_share")),
              TableLayout("Claim labels vs the human labels (labels: nli | verify): the labeller's accuracy",
                          table=LABELS, level="claim", line=("detector", "labeller"), metrics=("agreement", "kappa")))
    params: ClassVar[dict[str, Any]] = {"levels": ["claim", "response"], "claims": "data", "labels": "data",
                                        "nli_model": "microsoft/deberta-base-mnli", "nli_fallback": None,
                                        "nli_passages": 3, "nli_sentences": 3, "retrieval": "embedding",
                                        "verify_passages": 5, "passage_tokens": 256, "label_sample": None}

    def answers_of(self, dataset: str) -> str:
        """FActScore's biographies ship with the data; an entity list's are written by the run's model and labelled
        claim by claim here (no judge)."""
        return "generate_unjudged" if dataset in GENERATED else "provided"

    def answered(self, ctx: Any, items: list[Any]) -> None:
        """The answers' claim units and their labels, once the answers exist.

        `claims: extract`: units from the claims stage (`claims.extractor`: an LLM's atomic claims, replacing the
        data's claim units, unlabelled; or the offline `sentence` / `clause` units, added beside them); `claims:
        data` (default): the dataset's own claims. `labels: nli`: every claim labelled by NLI against the item's
        reference text (`nli_labels`), `labels: verify`: by retrieval + an LLM verifier (`verify_labels`); the
        answer's label then follows its claims; `labels: data` (default): the data's labels, the answer keeping the
        label its data gives. The units each answer ends up with are recorded in the cell's `units.jsonl`."""
        opts = self.options(ctx.config)
        for key, allowed in (("claims", ("data", "extract")), ("labels", ("data", "nli", "verify")),
                             ("retrieval", ("embedding", "bm25"))):
            if opts[key] not in allowed:
                raise HaldetError(f"{key} must be one of {', '.join(allowed)}, not {opts[key]!r}",
                                  where=f"suite_params.longform.{key}", hint="docs/longform.md")
        if ctx.dataset in GENERATED and (opts["claims"] != "extract" or opts["labels"] == "data"):
            raise HaldetError(f"the biographies of {ctx.dataset} are written by the model: they have no claims or "
                              "labels of their own", where="suite_params.longform",
                              hint="set claims: extract (claims.model or the run's model extracts them) and labels: "
                                   "verify (judge.model verifies them) or nli; docs/longform.md")
        if opts["claims"] == "extract":
            records = ClaimsStage(ctx).ensure(items)
            ctx.store.record_keys(ClaimsStage.name, records)
            for item in items:
                rec = records.get(item.id)
                if rec is None:  # the extraction failed (listed in claims.failed.jsonl): the data's units stay
                    item.instance = item.instance.model_copy(
                        update={"meta": {**item.instance.meta, EXTRACTION: {"failed": True}}})
                    continue
                data = item.instance  # the answer keeps the label its data gives (from its labelled claims)
                label = data.response_label or data.units_of("response")[0].category
                inst = claim_units_of([item], records)[0]
                item.instance = inst.model_copy(update={"response_label": label, "meta": {
                    **inst.meta, EXTRACTION: {"extractor": rec["judge"], "unit": rec["unit"],
                                              "claims": len(rec["claims"]), "unmapped": rec["unmapped"]}}})
        self._relabel(ctx, items, opts)
        record_units(ctx, items)

    def _relabel(self, ctx: Any, items: list[Any], opts: dict[str, Any]) -> None:
        """`labels: nli | verify`: every claim relabelled (its source and details in `meta.labels`)."""
        instances = [item.instance for item in items]
        if opts["labels"] == "nli":
            labelled, meta = label_claims(instances, model=opts["nli_model"], fallback=opts["nli_fallback"],
                                          k=int(opts["nli_passages"]), sentences=int(opts["nli_sentences"]),
                                          cache=ctx.store.root)
        elif opts["labels"] == "verify":
            judge = ctx.config.judge
            index = passage_index(opts["retrieval"], pages_of(instances), passage_tokens=int(opts["passage_tokens"]),
                                  top_k=int(opts["verify_passages"]))
            client = verifier_client(judge, cache=Path(ctx.store.root) / "claim_verify.jsonl",
                                     local=ctx.backend if judge.backend == "hf" and judge.model == ctx.model else None)
            labelled, meta = verify_claims(instances, client=client, verifier_id=f"{judge.backend}:{judge.model}",
                                           index=index, templates=ctx.config.templates)
        else:
            return
        if opts["label_sample"]:  # a person's labels of some of these claims: the labeller's agreement with them
            labelled, meta["label_sample_found"] = with_hand_labels(labelled, read_hand_labels(opts["label_sample"]))
        for item, inst in zip(items, labelled, strict=True):  # the answer's label follows its relabelled claims
            item.instance = inst.model_copy(update={"response_label": None, "meta": {
                **inst.meta, f"{opts['labels']}_labels": meta}})

    def levels_for(self, config: Any) -> tuple[str, ...]:
        return self.levels_from_options(config)

    def split_policy(self, config: Any) -> str:
        return split_if_trained(config)

    def extra_rows(self, instances: list[Instance], split: dict[str, list[str]], runs: list[Any],
                   config: Any) -> list[dict[str, Any]]:
        """The cell's response-level rows from each answer's claim scores (its claim-level runs' unit rows)."""
        unit_rows = [{**row, "dataset": "", "model": "", "detector": run.name, "level": run.level,
                      "variant": run.identity.get("variant") or "", "train_labels": run.train_labels}
                     for run in runs if run.level == "claim" for row in run.unit_scores.get("rows") or []]
        out = from_claims_rows(unit_rows, "claim")
        for row in out:  # the cell's own dataset and model are added by the caller
            del row["dataset"], row["model"]
        if self.options(config)["claims"] == "extract":
            out += extraction_rows(instances)
        if self.options(config)["labels"] in ("nli", "verify"):
            out += agreement_rows(instances, DATA)
        return out

    def unit_metrics(self, level: str, test: UnitData, val: UnitData | None, *, n_boot: int, ci: float,
                     seed: int, detector: Any = None) -> list[MetricValue]:
        """Response level: the main benchmark's metrics; claims: pooled unit metrics, bootstrap grouped by
        answer (a validation threshold only when there are validation claims)."""
        if level == "response":
            labelled = test.labelled()
            return evaluate(labelled.y, labelled.s, n_boot=n_boot, ci=ci, seed=seed) if len(labelled.y) else []
        return unit_metrics(test, val if val is not None and len(val.y) else None, n_boot=n_boot, ci=ci, seed=seed)

