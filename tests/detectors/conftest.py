"""The `nli` fixture of the detector tests: a lookup-table NLI model (`TableNLI`) installed as every detector's."""

from __future__ import annotations

import pytest
from test_detectors_standard import TableNLI

from haldet.detectors import _consistency


@pytest.fixture
def nli(monkeypatch):  # type: ignore[no-untyped-def]
    """Installs a `TableNLI` as every detector's NLI model; returns it (its `seen` lists the pairs asked)."""
    def install(table: dict[tuple[str, str], list[float]]) -> TableNLI:
        model = TableNLI(table)
        monkeypatch.setattr(_consistency, "load_pair_model",
                            lambda kind, name, fallback=None, **kw: (model, {"requested": name, "used": model.id}))
        return model
    return install
