"""The TRIVIA+ suite (seeds/triviaplus.txt): RAG long-context faithfulness, noisy-label regimes, length strata.

Importing the package registers the suite (`haldet.suites.triviaplus.suite`).
"""

from haldet.suites.triviaplus import suite as suite  # registers "triviaplus"
