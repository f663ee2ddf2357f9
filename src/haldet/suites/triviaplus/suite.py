"""TRIVIA+ as a haldet suite: given answers to questions over long articles, human labels, four noisy label sets.

Protocol (seed triviaplus.txt, sections 4-5; haldet's protocol where they differ):
- the answers ship with the data and are teacher-forced through the proxy model (the embedded SmolLM2-135M by
  default, a substitute for the paper's detectors' own models, named in every row); the release's own
  train / valid / test split is used as is;
- articles longer than the proxy model's window are fitted by the `long_context` policy (`truncate`: the passages
  most relevant to question and answer; `skip`: NaN with the reason), recorded per item, coverage per stratum;
- supervised detectors train on the labels of `train_labels` (clean, ws, dw, dl, rf; several = one run each,
  the paper's Table 6) and are always evaluated on the clean test labels; a second table evaluates on each noisy
  test label set (Table 5); the measured disagreement of each noisy column with the clean one is reported;
- thresholds (F1, precision, recall, accuracy) come from the validation split; the paper's best-F1-on-test is
  only the labelled variant `tune_on=test`;
- strata: context length (<1K, 1K-5K, >5K characters), domain and generator, with counts, coverage and Fisher's
  exact test of each stratum's share of correct predictions against the rest;
- Table 12: AUROC per ROUGE bin of the answer against the source question's ground-truth answer, when the items
  carry one (`meta["gold_answers"]`: a release-format gold column, a user's gold-answers file, HaluEval's right
  answer, MS MARCO's answers); without any, one line saying so instead of the table;
- Table 2 (the data's context lengths) and Table 13 (self-detect: the responses the proxy model wrote vs all), in
  `paper_tables`; Fig. 1, the test answers on a UMAP map fitted on the training answers, in `embedding_map`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from haldet.detectors.llm_judge import FAITHFULNESS
from haldet.errors import HaldetError
from haldet.evaluation.metrics import MetricValue
from haldet.evaluation.thresholds import at_threshold
from haldet.evaluation.units import UnitData, unit_metrics
from haldet.schema import Category, Instance
from haldet.stages.verdict_prompts import JUDGE_CONTEXT
from haldet.suites.base import DATA, Suite, TableLayout, register
from haldet.suites.triviaplus.analysis import (
    RATE_TABLES,
    DetectorScores,
    auroc_spread,
    hallucination_rates,
    hallucination_type_test,
    label_of,
    main_row,
    rouge_bin_rows,
    rouge_binned,
    strata_rows,
)
from haldet.suites.triviaplus.embedding_map import answer_maps
from haldet.suites.triviaplus.gold import Rouge
from haldet.suites.triviaplus.paper_tables import (
    PROXY,
    T2,
    T2_METRICS,
    T13,
    T13_METRICS,
    self_generator,
    table2,
    table13,
)
from haldet.suites.triviaplus.protocol import (
    CLEAN,
    REGIME_COLUMNS,
    VOTE_REGIMES,
    check_regime,
    label_disagreement,
    noisy_from_votes,
)
from haldet.text.long_context import POLICIES, fit_context

if TYPE_CHECKING:  # annotations only: matplotlib loads when a report draws
    from haldet.figures.data import Scatter
    from haldet.figures.render import FigureSet
    from haldet.store.reader import RunReader

NOISY = (*(r for r in REGIME_COLUMNS if r != CLEAN), *VOTE_REGIMES)
MARGIN_TOKENS = 512  # room left in the window beside the article: prompt template, question, answer, a judge's reply
JUDGE_MARGIN = 256  # tokens of the judge's window kept for its prompt's wording (the judges' own window)
CHARS_PER_TOKEN = 4  # a reply budget in tokens as characters, for a window counted in characters
T4, T4_TEST, T3, T5, T6, T11, NOISE = ("Table 4", "Table 4 (tuned on test)", "Table 3 / A.7", "Table 5", "Table 6",
                                       "Table 11", "label noise")
T12, T12_SPREAD = "Table 12", "Table 12 spread"
GOLD_HOW = {  # where a dataset's ground-truth answers come from, for the line that stands in for a missing Table 12
    "triviaplus": "the release has no such column: add a gold_answer column to the file or pass "
                  "dataset_params.triviaplus.gold_answers: FILE (docs/suites.md, TRIVIA+, Table 12)",
    "dolly_nc": "msmarco.json carries no MS MARCO answers (answers / wellFormedAnswers) for them",
    "ragtruth_qa": "the RAGTruth release carries no ground-truth answer",
}
_THRESHOLDED = ("f1", "precision", "recall", "accuracy")
MAIN = ("auroc", "aupr", *_THRESHOLDED)


@register("triviaplus")
class TriviaPlusSuite(Suite):
    title = "TRIVIA+: RAG long-context faithfulness under label noise"
    paper = "Rethinking Evaluation for LLM Hallucination Detection (TRIVIA+; Chen et al., 2025)"
    description = ("Given answers over long articles (up to ~94K characters), human labels; noisy training-label "
                   "regimes, length strata; LLM-as-a-judge, SelfCheck and proxy-model detectors.")
    # + its Table 4 companions as given responses: HaluEval's prompted hallucinations, RAGTruth-QA, Dolly (NC)
    datasets = ("triviaplus", "halueval_qa_pairs", "ragtruth_qa", "dolly_nc")
    answer_source = "provided"
    levels = ("response",)
    detectors = ("llm_judge", "llm_judge_fs", "selfcheck_bertscore", "perplexity", "saplma")
    # a prompt-optimisation loop, a LoRA-tuned classifier model, an every-layer attention pass: named to run
    optional = ("llm_judge_po", "sft", "redeep", "lettucedetect")
    splits = "given"
    metrics = ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt", "accuracy_opt", "threshold")
    tables = (
        TableLayout("Table 4 (clean test labels; threshold from validation)",
                    metrics=("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt", "accuracy_opt")),
        TableLayout("Table 4, tune-on-test variant (the paper's convention)", table=T4_TEST,
                    metrics=("f1", "precision", "recall", "accuracy")),
        TableLayout("Table 5 (evaluated on noisy test labels)", table=T5, line=("detector", "eval_labels"),
                    metrics=("auroc", "f1", "accuracy")),
        TableLayout("Table 6 (trained on noisy labels, clean test labels)", table=T6,
                    line=("detector", "train_labels"), metrics=("auroc", "f1", "precision", "recall", "accuracy")),
        TableLayout("Table 3 / A.7 (strata; Fisher p: share of right predictions vs the other strata)", table=T3,
                    line=("detector", "dimension", "stratum"),
                    metrics=("n_items", "coverage", "f1", "accuracy", "fisher_p")),
        TableLayout("Table 11 (detection rate by hallucination type)", table=T11,
                    metrics=("rate_contradicted", "rate_not_mentioned", "fisher_p")),
        *(TableLayout(f"{name} (hallucination rate by {dim} on the test split, Wilson 95% CI)", table=name,
                      line=("stratum",), metrics=("rate", "ci_low", "ci_high")) for dim, name in RATE_TABLES.items()),
        TableLayout("Table 12 (AUROC by ROUGE bin of the answer against the ground-truth answer; test split, clean "
                    "labels)", table=T12, line=("detector", "rouge_bin"), metrics=("halluc_rate", "auroc")),
        TableLayout("Table 12, AUROC spread across ROUGE bins (max - min; the paper: <= 0.05)", table=T12_SPREAD,
                    metrics=("spread",)),
        TableLayout("Table 2 (context length in characters as released; items, hallucinated share, generators; "
                    "domains in the note)", table=T2, line=("split",), metrics=T2_METRICS),
        TableLayout("Table 13 (self-detect: the test responses the proxy model wrote, and all test responses)",
                    table=T13, line=("detector", "responses", "tune_on"), metrics=T13_METRICS),
        TableLayout("Measured label noise (disagreement with the clean labels)", table=NOISE,
                    line=("eval_labels", "split"), metrics=("n_items", "disagree", "share")),
    )
    params: ClassVar[dict[str, Any]] = {"train_labels": [CLEAN], "long_context": "truncate", "context_tokens": None,
                                        "vote_noise_rate": 0.15, "vote_noise_seed": 0, "rouge_type": "rougeL",
                                        "self_generator": None, "answer_map": "umap"}
    settings: ClassVar[dict[str, Any]] = {"verdict": {"max_new_tokens": 256}}

    # --- options -----------------------------------------------------------------------------------------------
    def regimes(self, config: Any) -> list[str]:
        wanted = self.options(config)["train_labels"] or [CLEAN]
        return [check_regime(r) for r in ([wanted] if isinstance(wanted, str) else wanted)]

    # --- hooks the run flow calls ----------------------------------------------------------------------------------
    def html_section(self, rows: list[dict[str, Any]], figures: FigureSet | None = None) -> str:
        """Every TRIVIA+ table of suite_tables.md (Tables 3-6, 8-12, the measured label noise) in the HTML report,
        with the reason when Table 12 could not be computed (the HTML tables carry no note column)."""
        from html import escape

        from haldet.suites.report import html_tables  # lazy: h5py

        tables = html_tables(self, rows)
        why = sorted({f"{r['dataset']}: {r['note']}" for r in rows if r.get("table") == T12
                      and r.get("detector") == DATA and r.get("note")})
        notes = "".join(f"<p class=muted>{escape(n)}</p>" for n in why)
        return f"<h2 id=triviaplus>{escape(self.title)}</h2>\n{tables}{notes}" if tables else ""

    def run_plots(self, run: RunReader, labels: Callable[[str], dict[str, str]]) -> list[Scatter]:
        """Fig. 1: each cell's test answers on a map fitted on its training answers (`embedding_map`; the run's
        `answer_map` option: umap, falling back to PCA without umap-learn; pca; none)."""
        config = ((run.manifest or {}).get("config") or {}).get("suite_params") or {}
        how = str((config.get(self.name) or {}).get("answer_map", self.params["answer_map"]))
        return [] if how == "none" else answer_maps(run, labels, self.datasets, how)

    def prepare_instances(self, instances: list[Instance], backend: Any, config: Any) -> list[Instance]:
        """Fit each article into the token budget by the `long_context` policy; the record lands in
        `meta["long_context"]`, and an item the policy cannot feed gets `meta["unscorable"]` (NaN everywhere)."""
        opts = self.options(config)
        Rouge(str(opts["rouge_type"]))  # a bad Table 12 rouge_type stops the run here, before any scoring
        instances = with_vote_noise(instances, float(opts["vote_noise_rate"]), int(opts["vote_noise_seed"]))
        policy = opts["long_context"]
        if policy not in POLICIES:
            raise ValueError(f"suite_params.triviaplus.long_context must be one of {POLICIES}, not {policy!r}")

        def count(text: str) -> int:
            return len(backend.encode_text(text))

        judge = JudgeWindow.of(config, backend, count)
        out = []
        proxy = str(getattr(backend, "name", "") or "")  # Table 13: which generator's responses are the model's own
        instances = [i.model_copy(update={"meta": {**i.meta, PROXY: proxy}}) for i in instances]
        for inst in instances:
            budget = opts["context_tokens"]
            if budget is None:
                budget = backend.window() - MARGIN_TOKENS - count(f"{inst.instruction}\n{inst.question}\n"
                                                                  f"{inst.response or ''}")
            meta = dict(inst.meta)
            if budget <= 0:
                meta["unscorable"] = (f"question and answer leave no room for the article in the "
                                      f"{backend.window()}-token window")
                out.append(inst.model_copy(update={"meta": meta}))
                continue
            if judge is not None:
                meta.update(judge.fit(inst))
            fit = fit_context(inst.context, f"{inst.question} {inst.response or ''}", int(budget), count, policy)
            meta["long_context"] = fit.record()
            if fit.too_long:
                meta["unscorable"] = fit.reason
            out.append(inst.model_copy(update={"context": fit.text, "meta": meta}))
        return out

    def training_labels(self, instances: list[Instance], config: Any) -> list[tuple[str, dict[str, int]]]:
        out = []
        for regime in self.regimes(config):
            labels = {i.id: y for i in instances if (y := label_of(i, regime)) is not None}
            out.append((regime, labels))
        return out

    def unit_metrics(self, level: str, test: UnitData, val: UnitData | None, *, n_boot: int, ci: float,
                     seed: int, detector: Any = None) -> list[MetricValue]:
        """The unit metrics plus accuracy at the validation threshold (the paper's Table 4 reports accuracy)."""
        out = unit_metrics(test, val, n_boot=n_boot, ci=ci, seed=seed)
        first = out[0]
        threshold = next((m.value for m in out if m.metric == "threshold"), None)
        accuracy = None
        if threshold is not None:
            data = test.valid()
            accuracy = at_threshold(data.y, data.s, threshold).accuracy
        note = "" if threshold is not None else "no threshold from validation"
        return [*out, MetricValue("accuracy_opt", accuracy, None, None, first.n, first.n_pos, first.coverage, note)]

    def extra_rows(self, instances: list[Instance], split: dict[str, list[str]], runs: list[Any],
                   config: Any) -> list[dict[str, Any]]:
        """Tables 2, 3, 5, 6, 8-13, the tune-on-test variant of Table 4 and the measured label noise, as tidy rows."""
        items = {i.id: i for i in instances}
        regimes = self.regimes(config)
        rouge = Rouge(str(self.options(config)["rouge_type"]))
        rows: list[dict[str, Any]] = []
        primaries: list[DetectorScores] = []
        for run in runs:
            scores = run.unit_scores.get("items")
            if run.error or not scores:
                continue
            ds = DetectorScores(run.name, scores["val"], scores["test"], run.train_labels or CLEAN)
            base = {"detector": run.name, "family": run.family, "level": "response", "train_labels": ds.train_labels}
            primary = not run.train_labels or run.train_labels == regimes[0]
            if run.train_labels:
                rows += _metric_rows({**base, "table": T6}, main_row(ds, items), MAIN)
            if not primary:
                continue
            primaries.append(ds)
            rows += _metric_rows({**base, "table": T4_TEST}, main_row(ds, items, tune_on="test"), MAIN)
            for eval_labels in (CLEAN, *NOISY):
                if any(label_of(items[i], eval_labels) is not None for i in split["test"]):
                    rows += _metric_rows({**base, "table": T5, "eval_labels": eval_labels},
                                         main_row(ds, items, eval_labels=eval_labels), MAIN)
            for stratum in strata_rows(ds, items):
                stratum = {**stratum, "n_items": stratum["n"], "fisher_p": stratum.get("fisher_p_vs_rest")}
                rows += _metric_rows({**base, "table": T3, "dimension": stratum["dimension"],
                                      "stratum": stratum["stratum"]}, stratum,
                                     ("n_items", "n_pos", "coverage", *_THRESHOLDED, "fisher_p"))
            kinds = hallucination_type_test(ds, items)
            rates = kinds.get("detection_rate") or {}
            rows += _metric_rows({**base, "table": T11}, {
                "rate_contradicted": rates.get("contradicted"), "rate_not_mentioned": rates.get("not-mentioned"),
                "fisher_p": kinds.get("fisher_p"), "n": sum((kinds.get("n") or {}).values()),
                "note": kinds.get("note", "")}, ("rate_contradicted", "rate_not_mentioned", "fisher_p"))
        labels = {CLEAN: {i: y for i, inst in items.items() if (y := label_of(inst, CLEAN)) is not None}}
        for regime in NOISY:
            found = {i: y for i, inst in items.items() if (y := label_of(inst, regime)) is not None}
            if found:
                labels[regime] = found
        for r in hallucination_rates(items, split["test"]):  # Tables 8-10: the rate and its interval's ends
            rows += _metric_rows({"detector": "", "level": "response", "table": r["table"], "dimension": r["dimension"],
                                  "stratum": r["stratum"]}, r, ("rate", "ci_low", "ci_high"))
        rows += rouge_table(rouge_binned(items, split["test"], rouge), items, primaries)
        rows += table2(instances, split)
        rows += table13(primaries, items, *self_generator(instances, self.options(config)["self_generator"]))
        splits = {i: part for part, ids in split.items() for i in ids}
        for d in label_disagreement(labels, splits):
            rows += _metric_rows({"detector": "", "level": "response", "table": NOISE, "eval_labels": d["regime"],
                                  "split": d["split"]}, {"n_items": d["n"], "disagree": d["disagree"],
                                                         "share": d["share"], "n": d["n"]},
                                 ("n_items", "disagree", "share"))
        return rows


@dataclass(frozen=True)
class JudgeWindow:
    """The LLM judges' own window (`verdict.context_window`, in `verdict.context_unit`): each article is fitted anew
    from its full text, apart from the detectors' model's fit, by the `truncate` policy (a judge always gets the
    most relevant passages, never a skip), less the reply budget, the question, the answer and `JUDGE_MARGIN` for
    the prompt's wording. A local judge (no `verdict.model`) is the run's model: its window caps the setting."""

    window: int
    unit: str
    reply: int  # the judge's reply budget, in the window's unit
    count: Callable[[str], int]

    @classmethod
    def of(cls, config: Any, backend: Any, count_tokens: Callable[[str], int]) -> JudgeWindow | None:
        cfg = config.verdict
        if cfg.context_window is None:
            return None
        reply = cfg.max_new_tokens or FAITHFULNESS.max_new_tokens
        if cfg.context_unit == "chars":
            return cls(cfg.context_window, "chars", reply * CHARS_PER_TOKEN, len)
        window = cfg.context_window if cfg.model is not None else min(cfg.context_window, backend.window())
        return cls(window, "tokens", reply, count_tokens)

    def fit(self, inst: Instance) -> dict[str, Any]:
        """The `meta` entries of one item: the judge's context and the record of its fit."""
        margin = JUDGE_MARGIN * (CHARS_PER_TOKEN if self.unit == "chars" else 1)
        budget = self.window - self.reply - margin - self.count(f"{inst.question}\n{inst.response or ''}")
        if budget <= 0:
            raise HaldetError(f"the judge's {self.window}-{self.unit} window leaves no room for the article of "
                              f"{inst.id} beside a {self.reply}-{self.unit} reply", where="verdict.context_window",
                              hint="raise verdict.context_window or lower verdict.max_new_tokens")
        fit = fit_context(inst.context, f"{inst.question} {inst.response or ''}", budget, self.count, "truncate")
        return {JUDGE_CONTEXT: fit.text, "judge_long_context": {**fit.record(), "unit": self.unit,
                                                                "window": self.window}}


def rouge_table(binned: Any, items: dict[str, Instance], detectors: list[DetectorScores]) -> list[dict[str, Any]]:
    """Table 12 and its spread as tidy rows; without any ground-truth answer among the test items, one data line
    saying so (no AUROC, no rate) in their place."""
    base = {"level": "response", "ci_low": None, "ci_high": None}
    if not binned.bins:
        total = len(binned.missing)
        datasets = {items[i].dataset for i in binned.missing}
        how = (GOLD_HOW.get(datasets.pop(), "its release carries none") if len(datasets) == 1
               else "no item carries one")
        return [{**base, "table": T12, "detector": DATA, "rouge_bin": "—", "metric": metric, "value": None,
                 "n": total, "note": f"Table 12 not computed: 0 of {total} test items have a ground-truth answer "
                                     f"to bin by ({how})"} for metric in ("halluc_rate", "auroc")]
    bins = rouge_bin_rows(binned, items, detectors)
    out = []
    for r in bins:
        out += _metric_rows({"detector": r["detector"], "rouge_bin": r["rouge_bin"], "table": T12, **base}, r,
                            ("halluc_rate", "auroc"))
    for r in auroc_spread(bins):
        out += _metric_rows({"detector": r["detector"], "table": T12_SPREAD, **base}, r, ("spread",))
    return out


def with_vote_noise(instances: list[Instance], rate: float, seed: int) -> list[Instance]:
    """The items with the label sets built from the raw per-worker votes (`dw_votes`, `dl_votes`, `rf_votes`) in
    `label_variants`, over the items that carry votes, and the build record (method, rate, seed, labels flipped,
    workers used) in each item's `meta["vote_noise"]`; the items unchanged when none carries votes."""
    voted = [i for i in instances if i.meta.get("worker_votes") and label_of(i, CLEAN) is not None]
    if not voted:
        return instances
    clean = {i.id: label for i in voted if (label := label_of(i, CLEAN)) is not None}
    votes = {i.id: [(str(w), int(v)) for w, v in i.meta["worker_votes"]] for i in voted}
    built = {method: noisy_from_votes(clean, votes, method, rate, seed) for method in VOTE_REGIMES}
    records = {method: rec for method, (_, rec) in built.items()}
    out = []
    for inst in instances:
        if inst.id not in clean:
            out.append(inst)
            continue
        variants = {**inst.label_variants, **{m: Category.HALLUCINATION if labels[inst.id] else Category.CORRECT
                                              for m, (labels, _) in built.items()}}
        out.append(inst.model_copy(update={"label_variants": variants,
                                           "meta": {**inst.meta, "vote_noise": records}}))
    return out


def _metric_rows(base: dict[str, Any], values: dict[str, Any], metrics: tuple[str, ...]) -> list[dict[str, Any]]:
    """One tidy row per metric of `metrics` (value None when absent or NaN); n, n_pos, coverage, threshold and the
    note ride along on each row."""
    ride: dict[str, Any] = {k: values[k] for k in ("n", "n_pos", "coverage", "threshold") if k in values}
    note = str(values.get("note") or "")
    out = []
    for metric in metrics:
        value = values.get(metric)
        if isinstance(value, float) and math.isnan(value):
            value = None
        row: dict[str, Any] = {**base, "metric": metric, "value": value, "ci_low": None, "ci_high": None, **ride,
                               "note": note}
        out.append(row)
    return out
