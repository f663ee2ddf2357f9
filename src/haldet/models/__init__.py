"""Auxiliary models beside the target model: NLI and similarity pair models with their cache, IDF weights, passage
retrieval for claim verification (`passages`), and the provenance (identity, substitutes) of every auxiliary model
that produced a number."""
