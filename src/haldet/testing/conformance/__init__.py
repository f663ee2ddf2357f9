"""The detector conformance suite (our `check_estimator`): named checks every registered detector passes.

`check_detector(cls, params)` runs every check that applies to a detector, through the run's own scoring path
(`score_detector` on a synthetic cell) and directly, and returns the problems found, each prefixed by its check's
name (empty = conformant). The checks (`CHECKS`, in checks.py, one function per property) cover: declarations;
reading only the declared signals; no test-label or gold access; order and subset invariance; NaN with a reason for
missing evidence and no constant fallback; a deterministic fit and a save/load round trip (trained detectors);
one aligned, label-blind, order-free score per unit (unit-level detectors). tests/testing/test_conformance.py
runs each as
its own test per detector and variant.

A detector for which a property cannot hold declares it on its class, check name -> reason:
`conformance_exemptions = {"check_not_constant": "why"}`; an unknown check name or an empty reason is refused
(`exemptions`), and docs/detectors.md lists every exemption. Synthetic evidence comes from synthetic.py (one
`@signal_maker` per signal); harness.py runs a detector once per case for all its checks.
"""

from __future__ import annotations

from haldet.testing.conformance.checks import (
    CHECKS,
    FLOAT_RTOL,
    SPREAD_ATOL,
    CannotRun,
    Check,
    agree,
    applicable,
    check_detector,
    exemptions,
    run_check,
)
from haldet.testing.conformance.harness import Case, Spy, light, run_through_runner, split_of
from haldet.testing.conformance.synthetic import (
    SIGNAL_MAKERS,
    Maker,
    UndeclaredRead,
    signal_maker,
    synthetic_view,
    with_missing,
    with_units,
    without_gold,
)

__all__ = ["CHECKS", "FLOAT_RTOL", "SIGNAL_MAKERS", "SPREAD_ATOL", "CannotRun", "Case", "Check", "Maker", "Spy",
           "UndeclaredRead", "agree", "applicable", "check_detector", "exemptions", "light", "run_check",
           "run_through_runner", "signal_maker", "split_of", "synthetic_view", "with_missing", "with_units",
           "without_gold"]
