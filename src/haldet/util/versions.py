"""The versions a run records in its manifest (Python, haldet and the libraries that shape its numbers)."""

from __future__ import annotations

import platform
from importlib import metadata

from haldet.version import __version__

LIBRARIES = ("torch", "transformers", "numpy", "scikit-learn", "h5py", "pydantic", "datasets", "typer", "rich")


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "haldet": __version__}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = "not installed"
    return out
