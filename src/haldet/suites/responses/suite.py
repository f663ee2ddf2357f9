"""The `responses` suite: your own responses, teacher-forced through a model, scored by any detector.

Protocol: the responses are read by the model exactly as the hosted benchmarks' given responses are (the generate
stage's one teacher-forced pass, `tokens.input_format`: raw prompt + response by default); labels come from the
data. When no selected detector is trained, nothing is fitted, so every item is a test item: every response gets
a score, and the labelled ones are evaluated together. A trained detector needs labels: the items are then split
60/20/20 (seeded), fitted on train, scored on validation and test, evaluated on test. Response-level metrics are
OpenHalDet's (AUROC, AUPR, FPR@95 with a stratified bootstrap); unit levels (your `units`) are pooled over units
with the threshold from validation (`haldet.evaluation.units`). Unlabelled items are scored and never evaluated;
without any label a run gives scores and no metric rows.
"""

from __future__ import annotations

from typing import Any, ClassVar

from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError
from haldet.evaluation.metrics import METRICS, MetricValue, evaluate
from haldet.evaluation.units import UnitData, unit_metrics
from haldet.schema import UNIT_KINDS, Instance
from haldet.suites.base import Suite, TableLayout, register, split_if_trained, trained_detectors

UNIT_TABLE_METRICS = ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt")


def check_labels(config: Any, n_labelled: int, where: str) -> None:
    """A trained detector with no labelled response to fit on: one message naming them, before any work."""
    trained = trained_detectors(config)
    if trained and n_labelled == 0:
        free = [n for n, cls in DETECTORS if not cls.trains]
        raise HaldetError(
            f"detector(s) {', '.join(trained)} are trained on labels, but no response has a label", where=where,
            hint="add a `label` column (1 = hallucinated, 0 = correct) to at least some rows, or choose "
                 f"training-free detectors (e.g. {', '.join(sorted(free)[:8])}; `haldet detectors list`)")


@register("responses")
class ResponsesSuite(Suite):
    title = "Your own responses"
    paper = "docs/api.md (bring your own responses)"
    description = ("Responses you bring (a file or a DataFrame), teacher-forced through the model; scores for every "
                   "item, metrics where labelled.")
    datasets = ("responses",)
    answer_source = "provided"
    levels = ("response",)
    detectors = ("perplexity",)
    splits = "grouped"
    tables = (TableLayout("Response level (AUROC, AUPR, FPR@95)", metrics=METRICS, level="response"),
              *(TableLayout(f"{kind.capitalize()} level (pooled units; threshold from validation)",
                            metrics=UNIT_TABLE_METRICS, level=kind) for kind in UNIT_KINDS))
    params: ClassVar[dict[str, Any]] = {"levels": ["response"]}

    def levels_for(self, config: Any) -> tuple[str, ...]:
        """`suite_params.responses.levels`: response, and the unit kinds your `units` hold."""
        return self.levels_from_options(config)

    def split_policy(self, config: Any) -> str:
        return split_if_trained(config)

    def check_data(self, instances: list[Instance], config: Any, where: str) -> None:
        """A trained detector on unlabelled responses: refused."""
        check_labels(config, sum(1 for i in instances if i.units_of("response")[0].binary is not None), where=where)

    def prepare_instances(self, instances: list[Instance], backend: Any, config: Any) -> list[Instance]:
        """Refuse a trained detector on unlabelled responses before the model reads them."""
        self.check_data(instances, config, where=f"dataset {self.datasets[0]} ({len(instances)} items)")
        return instances

    def unit_metrics(self, level: str, test: UnitData, val: UnitData | None, *, n_boot: int, ci: float,
                     seed: int, detector: Any = None) -> list[MetricValue]:
        """No labelled unit: no metric (the scores stand alone). Response level: OpenHalDet's metrics; unit levels:
        the pooled unit metrics (no threshold without validation units)."""
        labelled = test.labelled()
        if len(labelled.y) == 0:
            return []
        if level == "response":
            return evaluate(labelled.y, labelled.s, n_boot=n_boot, ci=ci, seed=seed)
        return unit_metrics(test, val if val is not None and len(val.y) else None, n_boot=n_boot, ci=ci, seed=seed)
