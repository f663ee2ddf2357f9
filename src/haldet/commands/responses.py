"""Bring your own responses: score answers you already have, from Python (`haldet.score_responses`) or the CLI
(`haldet run --responses FILE`), through the `responses` suite and the one cell flow.

The data is checked before any model loads: the file's columns (one message naming the missing one, the file, and
the names accepted), every row, and that trained detectors have labels to fit on. Rows given in memory are written
to `<run dir>/responses_input.jsonl` first, so the run directory holds its input and reloads like any run.
"""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from haldet.commands.data_changes import check_same_data, record_data
from haldet.config import RunConfig
from haldet.config_files import compose_config
from haldet.datasets.base import get_adapter
from haldet.errors import HaldetError
from haldet.report.frames import RunFrames, load_frames
from haldet.schema import UNIT_KINDS
from haldet.store import RunStore, atomic_write_text
from haldet.suites.base import get_suite
from haldet.util.locking import notify
from haldet.util.progress import progress_factory

SUITE = DATASET = "responses"
INPUT_FILE = "responses_input.jsonl"


def responses_config(data_file: Path, config: RunConfig, where: str | None = None) -> RunConfig:
    """`config` for scoring the responses in `data_file`: the file as the data, the levels its units hold (unless
    the config names them), checked before any work (columns, rows, labels for trained detectors)."""
    where = where or str(data_file)
    adapter = get_adapter(DATASET, data_file, config.dataset_params.get(DATASET))
    instances, _ = adapter.load(limit=config.limit, seed=config.data_seed, on_bad_row=config.on_bad_row)
    get_suite(SUITE).check_data(instances, config, where=where)  # the suite through its registry, by name
    params = {k: dict(v) for k, v in config.suite_params.items()}
    if "levels" not in params.get(SUITE, {}):
        kinds = {u.kind for i in instances for u in i.units}
        params.setdefault(SUITE, {})["levels"] = ["response", *(k for k in UNIT_KINDS if k in kinds)]
    return config.model_copy(update={"suite": SUITE, "datasets": [DATASET], "data_dir": str(data_file),
                                     "suite_params": params})


def base_config(data_file: Path, models: Sequence[str], detectors: Sequence[str], *, limit: int | None = None,
                config_file: Path | None = None, **settings: Any) -> RunConfig:
    """The suite's settings under the config file under the given values (`settings`: any `RunConfig` field,
    `section__field` for a section's, e.g. evaluation__bootstrap=200)."""
    return compose_config(config_file, base=get_suite(SUITE).config_base(), datasets=[DATASET], models=list(models),
                       detectors=list(detectors), data_dir=str(data_file), limit=limit, **settings)


def _config(data_file: Path, models: list[str], detectors: Sequence[str], limit: int | None,
            config_file: str | Path | None, settings: dict[str, Any]) -> RunConfig:
    return base_config(data_file, models, list(detectors), limit=limit,
                       config_file=None if config_file is None else Path(config_file), **settings)


def write_input(data: Any, path: Path) -> Path:
    """Rows given in memory (a pandas DataFrame, or a list of dicts) as JSON lines; an empty cell (None, NaN) is
    written as null."""
    import pandas

    if isinstance(data, pandas.DataFrame):
        rows: list[Any] = data.to_dict("records")
    elif isinstance(data, Sequence) and not isinstance(data, str | bytes):
        rows = list(data)
    else:
        raise HaldetError(f"responses must be a DataFrame, a list of dicts or a file path, not {type(data).__name__}",
                          where="score_responses(data=...)",
                          hint="pass rows with prompt (or question) and response columns (docs/api.md)")
    bad = next((k for k, r in enumerate(rows) if not isinstance(r, Mapping)), None)
    if bad is not None:
        raise HaldetError(f"row {bad + 1} is a {type(rows[bad]).__name__}, not a dict",
                          where="score_responses(data=...)",
                          hint='each row is a dict such as {"prompt": ..., "response": ..., "label": 0}')
    if not rows:
        raise HaldetError("no responses given", where="score_responses(data=...)", hint="pass at least one row")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps({str(k): _plain(v) for k, v in r.items()}) + "\n" for r in rows))
    return path


def _plain(value: Any) -> Any:
    """A cell as plain JSON: numpy scalars and arrays as Python values, NaN as null."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def run_responses(config: RunConfig, root: Path, instances: Sequence[Any] | None = None, *, update: bool,
                  given: str, api: bool, **run_options: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """The one run of your responses, from the API and the CLI alike: data other than what `root` scored refused
    unless `update` (`haldet.commands.data_changes`), the run, what it scored recorded. `instances`: the data
    as loaded (default: loaded from `config.data_dir`); `run_options`: `haldet.flow.run.run`'s."""
    from haldet.flow.run import run  # lazy: jinja2

    if instances is None:
        adapter = get_adapter(DATASET, config.data_dir, config.dataset_params.get(DATASET))
        instances = adapter.load(limit=config.limit, seed=config.data_seed, on_bad_row=config.on_bad_row)[0]
    changed = check_same_data(root, config, instances, update=update, given=given, api=api)
    replaced = RunStore(root).read_results() if changed and (root / "results.json").exists() else None
    if changed:
        notify(f"the responses changed since the run in {root}: {'; '.join(changed)}; scoring them again (the "
               "manifest's history keeps what changed and the results it replaced)")
    rows, cells = run(config, root, update=update, **run_options)
    record_data(root, instances, changed, replaced)
    return rows, cells


def score_responses(data: Any, *, model: str | Sequence[str] = "smollm2-135m",
                    detectors: Sequence[str] = ("perplexity",), out: str | Path | None = None,
                    limit: int | None = None, config_file: str | Path | None = None, progress: bool = True,
                    update: bool = False, **settings: Any) -> RunFrames:
    """Score your responses with `detectors`, reading them teacher-forced with `model`: see `haldet.score_responses`."""
    from haldet.flow.results import warn_thin  # lazy: jinja2
    from haldet.report.build import write_run_files  # lazy: matplotlib

    models = [model] if isinstance(model, str) else list(model)
    root = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="haldet-responses-"))
    given = "score_responses(data=...)"
    if isinstance(data, str | Path):
        data_file = Path(data).resolve()
        if not data_file.is_file():
            raise HaldetError("no such responses file", where=str(data), hint="check the path")
        config = responses_config(data_file, _config(data_file, models, detectors, limit, config_file, settings))
        rows, cells = _run(config, root, None, update, given, progress)
    else:  # rows in memory: checked in a scratch file first, so a refused call leaves no run directory behind
        with tempfile.TemporaryDirectory() as scratch:
            checked = write_input(data, Path(scratch) / INPUT_FILE)
            try:
                config = responses_config(checked, _config(checked, models, detectors, limit, config_file, settings),
                                          where=given)
            except HaldetError as exc:  # named as the caller knows the rows, not by the scratch file
                raise HaldetError(exc.what, where=given if exc.where.startswith(scratch) else exc.where,
                                  hint=exc.hint) from None
            adapter = get_adapter(DATASET, checked, config.dataset_params.get(DATASET))
            instances = adapter.load(limit=config.limit, seed=config.data_seed, on_bad_row=config.on_bad_row)[0]
        config = config.model_copy(update={"data_dir": str(root.resolve() / INPUT_FILE)})
        rows, cells = _run(config, root, instances, update, given, progress, data=data)
    try:  # the files `haldet run --responses` writes, by the same writer
        write_run_files(root, suite=SUITE, rows=rows)
    except Exception as exc:  # a report failure never loses the results: they are on disk
        warnings.warn(f"reports not written into {root} ({type(exc).__name__}: {exc}); the results are saved: "
                      f"`haldet report {root}` retries", stacklevel=3)
    warn_thin(cells)
    return load_frames(root)


def _run(config: RunConfig, root: Path, instances: Sequence[Any] | None, update: bool, given: str, progress: bool,
         data: Any = None) -> tuple[list[dict[str, Any]], list[Any]]:
    """`run_responses` with a progress bar on stderr (`progress`); rows in memory (`data`) are written into the
    run directory once the data is accepted there."""
    # a changed config is refused before the input file is replaced
    from haldet.flow.run import check_run_dir  # lazy: jinja2

    try:
        if data is not None:
            assert instances is not None
            check_same_data(root, config, instances, update=update, given=given, api=True)
            if not update:
                check_run_dir(RunStore(root), config, update=False)
            write_input(data, Path(config.data_dir or root / INPUT_FILE))
        if not progress:
            return run_responses(config, root, instances, update=update, given=given, api=True)
        from rich.console import Console

        with progress_factory(Console(stderr=True)) as make:
            return run_responses(config, root, instances, update=update, given=given, api=True, progress=make)
    except HaldetError as exc:  # a changed config, named as the API takes it
        if exc.where != str(root) or "--update" not in exc.hint:
            raise
        raise HaldetError(exc.what, where=exc.where, hint="pass another out=, or update=True to re-run here (cached "
                          "evidence that still matches is reused; the manifest's history keeps the earlier config)"
                          ) from None
