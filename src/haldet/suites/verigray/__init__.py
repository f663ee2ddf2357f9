"""VeriGray (seed `verigray.txt`): sentence-level faithfulness of summaries with seven ordered classes.

Modules: `labels` (the class vocabulary and its order), `metrics` (protocol 1, protocol 2 ranking loss, per-class
F1, selective prediction), `classifier` (zero-shot 7-way LLM detector and its reply parser), `nli` (document ->
sentence entailment verifiers). The dataset adapter is `haldet.datasets.verigray`.
"""
