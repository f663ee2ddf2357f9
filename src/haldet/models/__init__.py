"""Auxiliary models beside the target model: NLI and similarity pair models with their cache, IDF weights, and the
provenance (identity, substitutes) of every auxiliary model that produced a number."""
