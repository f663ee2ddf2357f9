"""Packaged presets: one YAML file per seed paper that sets what the paper used (judge, sampling, token limits,
layers and pooling, each detector's paper variant, the NLI/encoder models it names, evaluation scope, thresholds).

A preset is an ordinary config layer: it lies over a suite's settings (when it names a suite) and under the config
file and the flags (`haldet run --preset NAME`). Besides run settings a preset file may hold `about` (one line),
`paper` (its seed) and `hallulens_commands` (defaults of `haldet hallulens build|evaluate`); those are not run
settings. What a preset cannot set is listed per paper in docs/replication.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from haldet.errors import HaldetError

PRESET_DIR = Path(__file__).parent
META_KEYS = ("about", "paper", "hallulens_commands")  # preset-file keys that are not run settings


@dataclass(frozen=True)
class Preset:
    name: str
    path: Path
    text: str
    settings: dict[str, Any]  # the run-config layer
    about: str = ""
    paper: str = ""
    hallulens_commands: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        """sha256 of the file's text (first 16 hex digits): what the manifest records beside the name."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    def record(self) -> dict[str, str]:
        return {"name": self.name, "hash": self.hash, "file": f"haldet/presets/{self.path.name}"}


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset(name: str, where: str = "--preset") -> Preset:
    """A packaged preset by name; an unknown name lists the known ones."""
    path = PRESET_DIR / f"{name}.yaml"
    if not name or "/" in name or not path.is_file():
        raise HaldetError(f"unknown preset {name!r}", where=where,
                          hint=f"presets: {', '.join(preset_names())} (`haldet presets list`)")
    text = path.read_text()
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise HaldetError("a preset file must hold a mapping of settings", where=str(path))
    commands = data.get("hallulens_commands") or {}
    return Preset(name=name, path=path, text=text, settings={k: v for k, v in data.items() if k not in META_KEYS},
                  about=str(data.get("about") or ""), paper=str(data.get("paper") or ""),
                  hallulens_commands={k: dict(v or {}) for k, v in commands.items()})
