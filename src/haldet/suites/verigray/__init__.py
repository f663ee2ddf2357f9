"""VeriGray (seed `verigray.txt`): sentence-level faithfulness of summaries with seven ordered classes.

Modules: `labels` (the class vocabulary and its order), `dataset` (the registered adapter `verigray`), `metrics`
(protocol 1, protocol 2 ranking loss, per-class F1, selective prediction), `classifier` (the zero-shot 7-way prompt
and its reply parser), `verigray_llm` (that classifier as the detector `verigray_llm`), `nli` (document ->
sentence entailment verifiers), `nli_verifier` (the detector `nli_verifier`), `evaluate` (result rows), `report`
(tables and plots), `suite` (the registered suite). Its LLM-Check baselines are the core detector `llmcheck`
(math in `haldet.backends.hf.llmcheck`).
"""
