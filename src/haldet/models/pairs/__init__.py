"""Pair models for the sample-consistency detectors and the fact checkers: one interface (`base.PairModel`,
`compute(pairs) -> [N, width]`), one module per kind of model (`entailment`, `support`, `similarity`,
`bertscore`), the loader that picks a model by name with its fallback (`loader.load_pair_model`) and the cache that
computes each distinct pair once (`cache.PairCache`)."""
