"""The layers of a run's config, bottom first: the suite's run settings, a preset (`haldet.presets`), the config
file, the flags (or the keyword overrides of the Python API). `haldet run` and `haldet.load_config` both resolve a
config here, so a `preset:` or `suite:` in a config file means the same in both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from haldet.config import RunConfig
from haldet.config_files import compose_config, merge_layers, read_config_file
from haldet.errors import HaldetError
from haldet.presets import load_preset
from haldet.suites.base import get_suite


def layer_base(suite: str | None, preset: str | None, where: str = "--preset") -> dict[str, Any]:
    """What lies under the config file and the flags: the suite's run settings (the suite asked for, else the
    preset's), and the preset over them. A preset made for one suite refuses another."""
    settings: dict[str, Any] = {}
    if preset:
        settings = {**load_preset(preset, where=where).settings, "preset": preset}
        own = settings.get("suite")
        if suite and own and suite != own:
            raise HaldetError(f"preset {preset!r} is made for suite {own!r}, but suite {suite!r} was asked for",
                              where=where, hint=f"drop --suite (the preset runs {own!r}) or pick another preset")
    name = suite or settings.get("suite")
    return merge_layers(get_suite(name).config_base() if name else {}, settings)


def load_config(path: Path | None = None, base: dict[str, Any] | None = None, **overrides: Any) -> RunConfig:
    """The config of a run: `base` < suite settings < preset < file < overrides (None = not given). The suite and
    the preset come from the overrides (`suite=`, `preset=`), else from the file, else from `base`."""
    file = read_config_file(path) if path is not None else {}
    base = base or {}
    suite = overrides.get("suite") or file.get("suite") or base.get("suite")
    preset = overrides.get("preset") or file.get("preset") or base.get("preset")
    where = "--preset" if overrides.get("preset") else f"{path} (preset)" if file.get("preset") else "preset"
    return compose_config(path, base=merge_layers(base, layer_base(suite, preset, where=where)), **overrides)
