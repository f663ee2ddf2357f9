"""The TRIVIA+ suite (seeds/triviaplus.txt): RAG long-context faithfulness, noisy-label regimes, length strata.

Modules: `dataset` (the registered adapter `triviaplus`), `protocol` (label regimes, strata, Fisher's test),
`analysis` (result rows of its tables), `suite` (the registered suite).
"""
