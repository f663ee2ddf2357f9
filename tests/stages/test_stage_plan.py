"""The stage planner: which stages a detector set needs and in which order, derived from what stages declare."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from haldet.detectors.base import DETECTORS
from haldet.errors import HaldetError
from haldet.signals import Signal
from haldet.stages.base import DecodingReader, Stage
from haldet.stages.counts import StageCounts, StageTally
from haldet.stages.loader import needed_stages
from haldet.stages.plan import plan, providers, stage_provides
from repo_paths import PACKAGE


def stage_order(signals: Iterable[Signal]) -> list[str]:
    """Names of the planned stages, in order (the primary stage first)."""
    return [cls.name for cls in plan(signals)]


def _requires(*names: str) -> set[Signal]:
    return set().union(*(DETECTORS.get(name).requires for name in names))


def test_plan_of_a_known_detector_set() -> None:
    # verdict, features, samples and the auxiliary prompt, asked in a scrambled order: run order is by `after`
    signals = _requires("llm_judge", "saplma", "semantic_entropy", "verbalized", "perplexity")
    assert stage_order(signals) == ["generate", "sample", "auxiliary", "features", "verdict"]
    assert needed_stages(signals) == ["sample", "auxiliary", "features", "verdict"]
    assert stage_order(_requires("self_eval", "eigenscore")) == ["generate", "sample", "auxiliary"]
    assert stage_order(_requires("ccp", "focus", "perplexity")) == ["generate"]  # token pass rides on generate
    assert stage_order(set()) == ["generate"]  # the answer exists whether or not a detector reads it


def test_every_signal_has_one_stage() -> None:
    by_signal = providers()
    assert set(by_signal) == set(Signal)
    assert list(stage_provides()) == ["generate", "sample", "auxiliary", "claim_p_true", "features", "redeep",
                                     "trace_answer", "unconditional",
                                     "verdict"]


def _toy(name: str, provides: set[Signal], after: tuple[str, ...] = ()) -> type[Stage]:
    attrs: dict[str, Any] = {"name": name, "provides": frozenset(provides), "after": after}
    return type(f"Toy{name.title()}", (Stage,), attrs)


def test_stages_that_run_after_each_other_are_refused() -> None:
    stages = [_toy("primary", {Signal.RESPONSE}), _toy("a", {Signal.SAMPLES}, ("b",)),
              _toy("b", {Signal.VERBALIZED}, ("a",))]
    with pytest.raises(HaldetError, match="cycle: a after b, b after a"):
        plan({Signal.SAMPLES, Signal.VERBALIZED}, stages)
    # either one alone is fine: `after` orders only the stages that are planned
    assert [cls.name for cls in plan({Signal.SAMPLES}, stages)] == ["a", "primary"]


def test_a_signal_no_stage_provides_is_refused() -> None:
    stages = [_toy("primary", {Signal.RESPONSE}), _toy("a", {Signal.SAMPLES}, ("primary",))]
    with pytest.raises(HaldetError, match="no stage provides hidden_mean"):
        plan({Signal.SAMPLES, Signal.HIDDEN_MEAN}, stages)
    assert [cls.name for cls in plan({Signal.SAMPLES}, stages)] == ["primary", "a"]


def test_a_signal_two_stages_provide_is_refused() -> None:
    stages = [_toy("primary", {Signal.RESPONSE}), _toy("a", {Signal.SAMPLES}), _toy("b", {Signal.SAMPLES})]
    with pytest.raises(HaldetError, match="provided by two stages"):
        plan({Signal.SAMPLES}, stages)


def test_stage_counts_keep_the_manifest_flat_form() -> None:
    tally = StageTally()
    tally.stage("generate").computed = 0
    tally.stage("sample").computed = 3
    tally.stage("sample").add_failed(1)
    tally.stage("sample").add_failed(2)
    tally.stage("features")  # touched, nothing counted: absent from the flat form
    assert dict(tally) == {"generate_computed": 0, "sample_computed": 3, "sample_failed": 3}
    assert tally.get("features_computed") is None and tally["sample_failed"] == 3
    again = StageTally.from_flat(dict(tally))
    assert again.stages["sample"] == StageCounts(computed=3, failed=3) and again == tally


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function bodies and TYPE_CHECKING blocks too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_generate_finds_its_readers_without_importing_them() -> None:
    """generate stores the features/auxiliary records read while decoding through the plan, so none of the three
    imports another back (function bodies and TYPE_CHECKING included); evaluation/ gets the stage map handed in."""
    src = PACKAGE
    assert not _imports(src / "stages" / "generate.py") & {"haldet.stages.auxiliary", "haldet.stages.features"}
    for path in (src / "evaluation").glob("*.py"):
        assert not {m for m in _imports(path) if m.startswith("haldet.stages")}, path.name
    readers = [cls.name for cls in plan(set(Signal)) if issubclass(cls, DecodingReader)]
    assert readers == ["auxiliary", "features"]
