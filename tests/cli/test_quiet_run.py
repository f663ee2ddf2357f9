"""What haldet itself prints besides its own progress: a substitute model is named once per run, in words (not the
hub's raw connection error), and the package metadata installs without setuptools' license deprecation."""

from __future__ import annotations

import logging
import tomllib
from typing import Any

import pytest

from haldet.errors import HaldetError
from haldet.models.pairs import loader
from repo_paths import REPO


class Stub:
    def __init__(self, name: str) -> None:
        self.id = name


def test_substitute_notice_once_in_words(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def build(kind: str, name: str, **kw: Any) -> Stub:
        calls.append(name)
        if name == "roberta-large-mnli":
            raise HaldetError("cannot load NLI model 'roberta-large-mnli': We couldn't connect to "
                              "'https://huggingface.co' to load the files")
        return Stub(name)

    monkeypatch.setattr(loader, "_build", build)
    monkeypatch.setattr(loader, "_FAILED", {})
    monkeypatch.setattr(loader, "hub_reachable", lambda: False)
    with caplog.at_level(logging.WARNING, logger="haldet"):
        metas = [loader.load_pair_model("nli", "roberta-large-mnli", fallback="llm:smollm2-135m")[1] for _ in range(3)]
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1, notices
    assert "'llm:smollm2-135m' runs instead" in notices[0] and "roberta-large-mnli" in notices[0]
    assert "hub cannot be reached" in notices[0] and "couldn't connect" not in notices[0]
    assert calls.count("roberta-large-mnli") == 1                      # not retried for every use
    assert all(m["loaded"] == "llm:smollm2-135m" and "couldn't connect" in m["fallback_reason"] for m in metas)


def test_pyproject_license_is_an_spdx_string() -> None:
    """setuptools >= 77 deprecates the `license = {text = ...}` table (a warning on every install)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))
