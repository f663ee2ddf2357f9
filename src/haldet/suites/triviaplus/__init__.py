"""The TRIVIA+ suite (Chen et al., 2025): RAG long-context faithfulness, noisy-label regimes, length strata.

Modules: `dataset` (the registered adapter `triviaplus`), `protocol` (label regimes, strata, Fisher's test),
`analysis` (result rows of its tables), `suite` (the registered suite).
"""
