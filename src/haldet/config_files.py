"""Run configs from their layers: a YAML/JSON file read into a mapping, mappings merged key by key, the result
validated as a `RunConfig`, with the misspelt setting or choice named (and the nearest valid one suggested)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from haldet.config import RunConfig
from haldet.errors import HaldetError, did_you_mean


def merge_layers(below: dict[str, Any], above: dict[str, Any]) -> dict[str, Any]:
    """`above` laid over `below`: mappings merge key by key at every depth (a layer that sets
    `detector_params.saplma.layer` keeps the `checkpoint_on` a lower layer set); any other value replaces."""
    out = dict(below)
    for key, value in above.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_layers(out[key], value)
        else:
            out[key] = value
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings of a YAML/JSON config file, as a mapping (an unreadable or malformed file is one error)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise HaldetError(f"cannot read config file: {exc.strerror}", where=str(path),
                          hint="check the path given to --config") from None
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        raise HaldetError("config file is not valid YAML", where=where,
                          hint="fix the syntax near that line") from None
    if not isinstance(loaded, dict):
        raise HaldetError("config file must hold a mapping of settings", where=str(path))
    return loaded


def compose_config(path: Path | None = None, base: dict[str, Any] | None = None, **overrides: Any) -> RunConfig:
    """The layers given, composed and validated: `base` < the YAML/JSON config file (optional) < the overrides (None
    = not given), key by key. It adds no layer of its own: a run's config, with the suite's settings and the
    preset a file or flag names, is `haldet.flow.layers.load_config` (`haldet.load_config`)."""
    data: dict[str, Any] = json.loads(json.dumps(base or {}))
    if path is not None:
        data = merge_layers(data, read_config_file(path))
    for key, value in overrides.items():
        if value is None or value == []:
            continue
        section, _, field = key.partition("__")
        if field:
            data.setdefault(section, {})[field] = value
        else:
            data[key] = value
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field_name = ".".join(str(p) for p in first["loc"])
        raise HaldetError(f"invalid setting {field_name!r}: {first['msg']}{_suggestion(first)}",
                          where=str(path) if path else "command-line options",
                          hint="see `haldet run --help` and docs/config.md for the accepted settings") from None


def _suggestion(error: Any) -> str:
    """'; did you mean ...?' for a misspelt setting name (the fields of its section) or a misspelt choice (the
    allowed values), else ""."""
    loc = [str(p) for p in error["loc"]]
    if error["type"] == "extra_forbidden":
        section: Any = RunConfig
        for part in loc[:-1]:
            field = section.model_fields.get(part) if isinstance(section, type) and issubclass(section, BaseModel) \
                else None
            annotation = field.annotation if field is not None else None
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
                return ""
            section = annotation
        guess = did_you_mean(loc[-1], section.model_fields)
    elif error["type"] == "literal_error" and isinstance(error.get("input"), str):
        guess = did_you_mean(error["input"], re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected"))))
    else:
        return ""
    return f"; {guess}" if guess else ""
