"""Suites: neighbouring benchmarks hosted on the same store, stages, detectors and reports.

A suite is one class with one decorator. It names its datasets (registered adapters), where its answers come from
(`answer_source`: `provided`, the responses ship with the data and are teacher-forced through the proxy model;
`generate`, answers are generated and judged as in the main benchmark), the levels it evaluates (`response`,
`entity`, `sentence`, `claim`, ...), its default detectors, its metrics and its table layouts, how items are split
(`grouped`: a seeded 60/20/20 split of items, never of units, grouped by `group_of`; `given`: the dataset's own
`Instance.split`; `none`: every item is a test item, for runs that fit nothing), and run settings under which
the user's config file and flags lie:

    @register("my_suite")
    class MySuite(Suite):
        title = "My benchmark"
        paper = "My Benchmark (Doe et al., 2025)"
        datasets = ("my_dataset",)
        levels = ("sentence",)
        detectors = ("likelihood", "entropy")
        tables = (TableLayout("Table 2", metrics=("auroc", "aupr")),)

`haldet run --suite my_suite` then runs it (`haldet suites list` shows every suite). A suite folder with a
`commands.py` module (a typer `app`) adds the command group `haldet <folder> ...` (`haldet.suites.groups`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError, unknown_keys
from haldet.evaluation.metrics import MetricValue
from haldet.evaluation.units import UNIT_METRICS, UnitData, unit_metrics
from haldet.figures.data import Scatter
from haldet.registry import Registry
from haldet.schema import LEVELS, Instance, SpanLabel

if TYPE_CHECKING:  # annotations only: matplotlib loads when a report draws
    from haldet.figures.render import FigureSet
    from haldet.store.reader import RunReader

DATA = "(data)"  # the `detector` of a suite's rows that describe the data (label statistics), not a detector
ACROSS_MODELS = "(across models)"  # the `model` of rows comparing the cells of a run (e.g. proxy correlation)
SPLIT_POLICIES = ("grouped", "given", "none")


@dataclass(frozen=True)
class TableLayout:
    """One table of a suite's report: detectors as rows, `metrics` as columns, at one `level`, one table per model
    (and per dataset when the suite has several)."""

    title: str
    metrics: tuple[str, ...] = ("auroc", "aupr", "f1_opt", "precision_opt", "recall_opt")
    level: str | None = None  # None: the suite's first level
    table: str | None = None  # rows of a suite's own table (`Suite.extra_rows`, their `table` column); None: metrics
    line: tuple[str, ...] = ("detector",)  # the row columns that name one line of the table


class Suite:
    """Base class; subclasses set the class attributes (and may override `group_of` and `unit_metrics`)."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    paper: ClassVar[str] = ""                     # where its protocol is defined (seed file or citation)
    description: ClassVar[str] = ""
    datasets: ClassVar[tuple[str, ...]] = ()
    answer_source: ClassVar[str] = "provided"     # "provided" | "generate"
    levels: ClassVar[tuple[str, ...]] = ("response",)
    detectors: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[tuple[str, ...]] = ()      # the paper's detectors run only when named (--detector):
                                                  # a model beside the run's, or a costly pass of their own
    metrics: ClassVar[tuple[str, ...]] = UNIT_METRICS
    tables: ClassVar[tuple[TableLayout, ...]] = ()
    splits: ClassVar[str] = "grouped"             # "grouped" | "given" | "none" (every item a test item)
    outputs: ClassVar[tuple[tuple[str, str], ...]] = ()  # (title, what writes it) of tables a command of the
                                                         # suite's own writes, not a run
    settings: ClassVar[dict[str, Any]] = {}       # RunConfig defaults (e.g. {"limit": None, "tokens": {...}})

    def __init__(self) -> None:
        bad = [lv for lv in self.levels if lv not in LEVELS]
        if bad or self.answer_source not in ("provided", "generate") or self.splits not in SPLIT_POLICIES:
            raise ValueError(f"suite {self.name!r}: levels must be among {LEVELS} (got {bad}), answer_source provided|"
                             f"generate (got {self.answer_source!r}), splits {'|'.join(SPLIT_POLICIES)} (got "
                             f"{self.splits!r})")

    def config_base(self) -> dict[str, Any]:
        """The run settings this suite implies; a config file and command-line flags override them."""
        return {"limit": None, **self.settings, "suite": self.name, "datasets": list(self.datasets),
                "detectors": list(self.detectors)}

    params: ClassVar[dict[str, Any]] = {}         # suite options (RunConfig.suite_params[name]) and defaults

    def options(self, config: Any) -> dict[str, Any]:
        """The suite's options: its defaults under `suite_params[<suite>]` of the config; unknown keys fail."""
        given = dict((getattr(config, "suite_params", None) or {}).get(self.name, {}))
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            raise HaldetError(f"{unknown_keys('option(s)', unknown, self.params)} for suite {self.name!r}",
                              where=f"suite_params.{self.name}",
                              hint=f"options: {', '.join(sorted(self.params)) or '(none)'}")
        return {**self.params, **given}

    def levels_for(self, config: Any) -> tuple[str, ...]:
        """The levels a run evaluates (default: `levels`; a suite may take them from its options)."""
        return self.levels

    def split_policy(self, config: Any) -> str:
        """How a run's items are split (default: `splits`; a suite may decide from the run's detectors)."""
        return self.splits

    def levels_from_options(self, config: Any) -> tuple[str, ...]:
        """For a suite whose levels are an option: `suite_params.<suite>.levels`, each a known level."""
        wanted = self.options(config)["levels"]
        wanted = [wanted] if isinstance(wanted, str) else list(wanted)
        bad = [lv for lv in wanted if lv not in LEVELS]
        if bad or not wanted:
            raise HaldetError(f"unknown level(s) {', '.join(bad) or '(none given)'}",
                              where=f"suite_params.{self.name}.levels", hint=f"levels: {', '.join(LEVELS)}")
        return tuple(wanted)

    def check_data(self, instances: list[Instance], config: Any, where: str) -> None:
        """Refuse, before any work, data the suite cannot evaluate under `config` (one `HaldetError` naming
        `where` the data came from). Default: accept."""

    def prepare_instances(self, instances: list[Instance], backend: Any, config: Any) -> list[Instance]:
        """The loaded instances as the suite feeds them to the model (e.g. a long context fitted to the window,
        with the policy recorded in `meta`); an instance it cannot feed gets `meta["unscorable"]` = the reason
        (every detector then gives it NaN with that reason). Default: unchanged."""
        return instances

    def answers_of(self, dataset: str) -> str:
        """Where the answers of `dataset` come from: `answer_source` by default. A suite whose datasets differ says
        so per dataset; `generate_unjudged` generates the answers and leaves their labels to the suite (`answered`:
        e.g. the longform suite's claims labelled by a verifier), no judge asked."""
        return self.answer_source

    def answered(self, ctx: Any, items: list[Any]) -> None:
        """Called once the items have their answers (`Item.generation`), before labels and units are read: a suite
        may set units of the answers here (e.g. the longform suite's extracted claims, through the claims stage of
        the cell context `ctx`) by replacing `item.instance`. Default: nothing."""

    def training_labels(self, instances: list[Instance], config: Any) -> list[tuple[str, dict[str, int]]]:
        """(name, binary label by item id) of each label set trained detectors fit on, in turn; evaluation always
        uses the response labels. Default: one pass on the data's own labels (an empty list means that)."""
        return []

    def extra_rows(self, instances: list[Instance], split: dict[str, list[str]], runs: list[Any],
                   config: Any) -> list[dict[str, Any]]:
        """Result rows of the suite's own tables beyond the per-level metrics (each with a `table` column)."""
        return []

    def run_rows(self, unit_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Result rows of tables that compare the cells of a run (e.g. proxy models scoring the same items), from
        every cell's unit-score rows (`unit_scores.csv`); each row names its dataset, model and `table`."""
        return []

    def group_of(self, instance: Instance) -> str:
        """Items sharing a group land in the same split part (e.g. answers about one document)."""
        return instance.id

    def unit_tags_of(self, level: str, units: list[tuple[Instance, SpanLabel]]) -> dict[str, list[str]]:
        """Per-unit tags of the pooled test units (e.g. POS, sentence position) for breakdowns; {} by default."""
        return {}

    def html_section(self, rows: list[dict[str, Any]], figures: FigureSet | None = None) -> str:
        """The suite's own part of the HTML report (its tables and plots from the result rows); empty by default.
        Plots are drawn into `figures` (`figures.add`), which embeds them and keeps their PDF and PNG files."""
        return ""

    def run_plots(self, run: RunReader, labels: Callable[[str], dict[str, str]]) -> list[Scatter]:
        """Plots the report draws from a run's stored evidence rather than its result rows (e.g. TRIVIA+'s map of
        the answers' hidden states), read through the run's reader `run`; `labels(dataset)`: item id -> the
        category that ships with the data. The report draws each into `report.html` and `figures/` (PDF, PNG);
        none by default."""
        return []

    def unit_metrics(self, level: str, test: UnitData, val: UnitData | None, *, n_boot: int, ci: float,
                     seed: int, detector: Any = None) -> list[MetricValue]:
        """Metrics of one detector at one level; override to add a suite's own (e.g. ranking loss). `detector` is
        the detector instance that scored (its declarations, e.g. a native decision threshold, may matter)."""
        return unit_metrics(test, val, n_boot=n_boot, ci=ci, seed=seed)

    @classmethod
    def info(cls) -> dict[str, Any]:
        return {"name": cls.name, "title": cls.title, "paper": cls.paper, "datasets": list(cls.datasets),
                "protocol": cls.answer_source, "levels": list(cls.levels), "detectors": list(cls.detectors),
                "optional_detectors": list(cls.optional), "tables": [t.title for t in cls.tables],
                "other_outputs": [{"table": t, "written_by": w} for t, w in cls.outputs],
                "splits": cls.splits, "params": dict(cls.params), "description": cls.description}


SUITES: Registry[type[Suite]] = Registry("suite", "haldet.suites", in_suites=True)

register = SUITES.register  # class decorator: @register("name")


def get_suite(name: str, where: str = "--suite") -> Suite:
    """A suite instance by registry name (unknown names list the known ones)."""
    try:
        return SUITES.get(name, where=where)()
    except ValueError as exc:
        raise HaldetError(str(exc), where=f"suite {name}", hint="fix the suite class's attributes") from None


def trained_detectors(config: Any) -> list[str]:
    """The selected detectors that fit on labels."""
    return [name for name in config.detectors if DETECTORS.get(name, where="--detector").trains]


def split_if_trained(config: Any) -> str:
    """Every item a test item when nothing is fitted; a seeded grouped 60/20/20 split when something is."""
    return "grouped" if trained_detectors(config) else "none"
