"""Your responses edited between two runs into one directory: noticed, said by id, and treated like a changed config.

A run of your responses records what it scored (`responses_items.json` in the run directory: per item a digest of
its prompt, context, response and units, and its label). Scoring into the same directory again compares the data
given now with that record: items added or removed, answers, prompts, labels or units that differ, each as a
count and a few ids. A change is refused unless the caller asks to update (`--update`, `update=True`), as a changed
config is (`haldet.flow.run.check_run_dir`); with it, the run goes on and the manifest's history keeps what changed
and the results it replaced. A different file into the same directory is named by the option the caller gave.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.schema import Instance
from haldet.store import RunStore, atomic_write_text

ITEMS_FILE = "responses_items.json"
SHOWN_IDS = 3  # ids named per kind of change


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def item_record(instances: Sequence[Instance]) -> dict[str, dict[str, Any]]:
    """Per item id: digests of what the model reads (prompt, context, response) and of the units, and its label."""
    return {inst.id: {"prompt": _digest([inst.question, inst.context]), "response": _digest(inst.response or ""),
                      "label": (inst.response_label.value if inst.response_label is not None else None),
                      "units": _digest([u.model_dump(mode="json") for u in inst.units if u.kind != "response"])}
            for inst in instances}


def _ids(ids: list[str]) -> str:
    shown = ", ".join(i.rsplit("/", 1)[-1] for i in ids[:SHOWN_IDS])
    return shown + (f", ... ({len(ids) - SHOWN_IDS} more)" if len(ids) > SHOWN_IDS else "")


def changes(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """What differs between two item records, one line per kind: '2 items added (q7, q8)', '1 label differs (q3)'."""
    out = []
    added, removed = [i for i in new if i not in old], [i for i in old if i not in new]
    for n, what in ((added, "added"), (removed, "removed")):
        if n:
            out.append(f"{len(n)} item{'s' if len(n) > 1 else ''} {what} ({_ids(n)})")
    both = [i for i in new if i in old]
    for field, noun in (("response", "answer"), ("prompt", "prompt or context"), ("label", "label"),
                        ("units", "units")):
        differ = [i for i in both if old[i].get(field) != new[i].get(field)]
        if differ:
            out.append(f"{len(differ)} {noun}{'s' if len(differ) > 1 and noun != 'units' else ''} "
                       f"differ{'s' if len(differ) == 1 and noun != 'units' else ''} ({_ids(differ)})")
    return out


def check_same_data(root: Path, config: RunConfig, instances: Sequence[Instance], *, update: bool, given: str,
                    api: bool) -> list[str]:
    """Before a run into `root`: refuse data other than the data the directory scored (another file, or the same
    file edited), unless `update`. Returns what changed (empty: the same data, or a new directory). `given`: the
    option as the caller named it (`--responses FILE`, `score_responses(data=...)`)."""
    manifest = RunStore(root).read_manifest() or {}
    old_config = manifest.get("config")
    if old_config is None:
        return []
    flag, new_out = ("update=True", "another out=") if api else ("--update", "a new --out DIR")
    if not update and set(RunConfig.model_validate(old_config).diff(config)) - {"data_dir"}:
        return []  # another config (--limit, detectors, ...): refused as such by the run (`check_run_dir`)
    old_file = old_config.get("data_dir")
    if old_file != config.data_dir and not update:
        raise HaldetError(f"this output directory holds the scores of another responses file ({old_file}), not "
                          f"the data given by {given}", where=str(root),
                          hint=f"pass {new_out} for this file, or {flag} to score it here (the manifest's history "
                               "keeps the earlier config and results)")
    stored = root / ITEMS_FILE
    if not stored.exists():
        return []
    lines = changes(json.loads(stored.read_text()), item_record(instances))
    if lines and not update:
        raise HaldetError(f"the responses given by {given} differ from those this output directory scored: "
                          + "; ".join(lines), where=str(root),
                          hint=f"pass {flag} to score the edited data here (the manifest's history keeps what "
                               f"changed and the results it replaced), or {new_out} to keep both runs apart")
    return lines


def record_data(root: Path, instances: Sequence[Instance], changed: list[str],
                replaced: list[dict[str, Any]] | None) -> None:
    """After a run: what it scored (`ITEMS_FILE`), and, when the data changed, an entry in the manifest's history
    saying what changed, with the result rows it replaced."""
    store = RunStore(root)
    with store.lock():
        atomic_write_text(root / ITEMS_FILE, json.dumps(item_record(instances), sort_keys=True))
        if changed:
            manifest = store.read_manifest() or {}
            manifest.setdefault("history", []).append({
                "data_changed": changed, "results": replaced or [],
                "replaced_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")})
            store.write_manifest(manifest)
