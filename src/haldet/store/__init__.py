"""The run directory, its one owner: everything that writes or reads a run goes through this package.

Layout:
    RUN/manifest.json                     resolved config, hash, versions, fingerprints, timings, `run_format`
    RUN/results.json, results.csv         one row per (dataset, scenario, model, detector, family, metric)
    RUN/<dataset>/<model>/<stage>.jsonl   one record per item (`id`, `key`, payload)
    RUN/<dataset>/<model>/<stage>/*.h5    array shards, each written whole then renamed into place
    RUN/<dataset>/<model>/scores/<log>.jsonl  one detector's scores (`names.ScoreLog` builds and parses the names)
    RUN/<dataset>/<model>/keys.json       the key(s) of each item's record of every stage the run used

Modules: `files` (atomic writes, `StageLog`, `ArrayStore`), `run` (`RunStore`, `CellStore`: writing), `names` (the
run format, score-log names), `records` (reading JSONL logs whole), `reader` (`RunReader`: reading a run back as
the run used it).
"""

from haldet.store.files import (
    ArrayStore,
    StageLog,
    atomic_path,
    atomic_write_text,
    clean_stale_temps,
    h5_name,
    read_json,
    temp_path,
)
from haldet.store.names import KEYS, RUN_FORMAT, ScoreLog
from haldet.store.run import CellStore, RunStore, model_slug, write_parquet

__all__ = ["KEYS", "RUN_FORMAT", "ArrayStore", "CellStore", "RunStore", "ScoreLog", "StageLog", "atomic_path",
           "atomic_write_text", "clean_stale_temps", "h5_name", "model_slug", "read_json", "temp_path",
           "write_parquet"]
