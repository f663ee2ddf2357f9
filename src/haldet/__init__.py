"""haldet: benchmark hallucination detectors for LLMs under one fair protocol.

The public API (everything else may move between releases)::

    import haldet
    config = haldet.load_config(None, datasets=["halueval_qa"], detectors=["perplexity"], limit=20)
    rows, cells = haldet.run(config, "runs/exp1")      # the same run as `haldet run`
    frame = haldet.load_results("runs/exp1")           # its results as a pandas DataFrame
    scores = haldet.load_scores("runs/exp1", "halueval_qa", "smollm2-135m")  # test labels, scores, probabilities
    run = haldet.load_run("runs/exp1")                 # .results, .items, .labels, .scores DataFrames; .table()

    scored = haldet.score_responses(rows, detectors=["perplexity"])  # your own responses (docs/api.md)
    scored.table().sort_values("perplexity", ascending=False).head()

    @haldet.register("my_detector")                    # a detector plugin: one class, one decorator
    class MyDetector(haldet.Detector):
        requires = frozenset({haldet.Signal.TOKEN_LOGPROBS})
        def score(self, items: haldet.SignalView) -> haldet.Scores: ...

    haldet.check_detector(MyDetector)                  # the conformance suite: [] when conformant

Names are imported on first use, so `import haldet` stays light (no torch until a run needs it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from haldet.version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas

    from haldet.report.frames import RunFrames

__all__ = ["Detector", "HaldetError", "RunConfig", "Scores", "Signal", "SignalView", "ThinCellWarning", "UnitScores",
           "__version__",
           "check_detector", "load_config", "load_results", "load_run", "load_scores", "register", "run",
           "score_responses"]


def run(config: Any, out: str | Path, **options: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """Run a config (a `RunConfig`) into the run directory `out`, as `haldet run` does: returns the result rows and
    the per-cell results. `options`: update, progress, on_cell, executor ("serial" | "ray"), ray_address."""
    from haldet.flow.results import warn_thin  # lazy: public API
    from haldet.flow.run import run as run_config  # lazy: public API

    rows, cells = run_config(config, Path(out), **options)
    warn_thin(cells)  # a cell too thin to rank detectors: warned here as the CLI prints it
    return rows, cells


def load_results(run_dir: str | Path) -> pandas.DataFrame:
    """A finished (or partly finished) run's tidy result rows as a DataFrame: one row per dataset, model, detector,
    level and metric, with value, CI, N, coverage, cost and provenance columns."""
    import pandas

    from haldet.store import RunStore  # lazy: public API

    return pandas.DataFrame(RunStore(Path(run_dir)).read_results())


def load_scores(run_dir: str | Path, dataset: str, model: str) -> pandas.DataFrame:
    """One cell's test items as a DataFrame: `id`, `label` (1 = hallucination) and, per detector, its raw score
    (column named after it) and, when a calibration ran, its calibrated P(hallucination) (`<detector>.p`)."""
    import pandas

    from haldet.errors import HaldetError  # lazy: public API
    from haldet.report.rundata import load_run  # lazy: public API

    data = load_run(run_dir).cell_scores(dataset, model)
    if data is None:
        raise HaldetError(f"no test split for {dataset} | {model}", where=str(run_dir),
                          hint="check the dataset and model names; the cell may have failed before splitting")
    columns: dict[str, Any] = {"id": data.ids, "label": data.labels}
    for name, values in data.scores.items():
        columns[name] = values
        if name in data.probabilities:
            columns[f"{name}.p"] = data.probabilities[name]
    return pandas.DataFrame(columns)
def load_run(run_dir: str | Path) -> RunFrames:
    """A run directory (finished, or still running: what is stored so far) as DataFrames: `.results` (the result
    rows), `.items` (prompt, response, split, label per answered item), `.labels`, `.scores` (one row per detector,
    level, item and unit, with the reason of a NaN); `.table(level)` joins items with one column per detector."""
    from haldet.report.frames import load_frames  # lazy: public API

    return load_frames(Path(run_dir))


def score_responses(data: Any, *, model: str | Sequence[str] = "smollm2-135m",
                    detectors: Sequence[str] = ("perplexity",), out: str | Path | None = None,
                    limit: int | None = None, config_file: str | Path | None = None, progress: bool = True,
                    update: bool = False, **settings: Any) -> RunFrames:
    """Score responses you already have with any detectors, the model reading each one teacher-forced.

    `data`: a DataFrame, a list of dicts, or a JSONL/CSV/Parquet file, with `prompt` (or `question`) and
    `response` (or `answer`), optional `context`, `label` (1/true/hallucination, 0/false/correct, empty =
    unlabelled), `units` (labelled spans of the response) and `id` (your id comes back as `source_id`). `out`: the
    run directory (default: a new temporary one), written like `haldet run --responses` writes it (results, scores,
    tables.md, suite_tables.md, report.html); reruns reuse what is cached. Other data or another config than `out`
    holds is refused, saying what changed, unless `update=True` (the manifest's history keeps the earlier).
    `settings`: any run setting (`evaluation__bootstrap=200`).
    Returns the run as `load_run` does: every response scored when no detector is trained; metric rows in
    `.results` only for labelled responses. A trained detector needs labels: refused, before any work, without."""
    from haldet.commands.responses import score_responses as score  # lazy: public API

    return score(data, model=model, detectors=detectors, out=out, limit=limit, config_file=config_file,
                 progress=progress, update=update, **settings)


def __getattr__(name: str) -> Any:
    """The public classes and functions, imported when first named."""
    if name in ("Detector", "Scores", "UnitScores", "register"):
        from haldet.detectors import base  # lazy: public API

        return getattr(base, name)
    if name in ("Signal", "SignalView"):
        from haldet import signals  # lazy: public API

        return getattr(signals, name)
    if name == "RunConfig":
        from haldet.config import RunConfig  # lazy: public API

        return RunConfig
    if name == "load_config":  # suite settings < preset < file < keyword overrides, as `haldet run` resolves them
        from haldet.flow.layers import load_config  # lazy: public API

        return load_config
    if name in ("HaldetError", "ThinCellWarning"):
        from haldet import errors  # lazy: public API

        return getattr(errors, name)
    if name == "check_detector":
        from haldet.testing.conformance import check_detector  # lazy: public API

        return check_detector
    raise AttributeError(f"module 'haldet' has no attribute {name!r}")
