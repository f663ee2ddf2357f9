"""VeriGray (seed `verigray.txt`): sentence-level faithfulness of summaries with seven ordered classes.

Modules: `labels` (the class vocabulary and its order), `metrics` (protocol 1, protocol 2 ranking loss, per-class
F1, selective prediction), `classifier` (the zero-shot 7-way prompt and its reply parser), `nli` (document ->
sentence entailment verifiers), `evaluate` (result rows), `report` (tables and plots), `suite` (the registered
suite). The dataset adapter is `haldet.datasets.verigray`; the detectors are
`haldet.detectors.verigray_llm`, `nli_verifier` and `llmcheck` (math in `haldet.llmcheck`).
"""

from haldet.suites.verigray.suite import VeriGraySuite

__all__ = ["VeriGraySuite"]
