"""`haldet annotate` refuses, before it labels anything, a judge whose local model is not here: one message naming
the judge and the model, not one failure per item after the others were judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from haldet.commands.annotate import annotate_run
from haldet.config import RunConfig
from haldet.errors import HaldetError
from haldet.models import provenance


def run_dir(tmp_path: Path) -> Path:
    """A run directory with its manifest and config only: nothing generated yet."""
    root = tmp_path / "run"
    root.mkdir()
    config = RunConfig.model_validate({"limit": 2, "detectors": ["perplexity"]})
    (root / "manifest.json").write_text(json.dumps({"config": config.model_dump(mode="json")}))
    return root


def test_a_missing_judge_model_fails_annotate_before_any_label(tmp_path: Path, monkeypatch: Any) -> None:
    root = run_dir(tmp_path)
    real = provenance.locate
    monkeypatch.setattr(provenance, "locate", lambda name: None if name == "minilm" else real(name))
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(HaldetError) as raised:
        annotate_run(root, {})  # the default cascade: HaluEval-QA's short answers go to the similarity judge
    assert "'rule:reference_similarity'" in raised.value.what and "'minilm'" in raised.value.what
    assert raised.value.where == "judge"
    with pytest.raises(HaldetError, match="'minilm'"):
        annotate_run(root, {"kind": "exec"}, compare_with="cascade")  # the judge compared with is checked too
    assert sorted(p.name for p in root.iterdir() if p.name != "run.lock") == before  # nothing labelled or written
