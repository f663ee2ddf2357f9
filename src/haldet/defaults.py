"""What `haldet run` scores when no detector is named, and why the detectors it leaves out are left out (said under
the results of such a run)."""

from __future__ import annotations

DEFAULT_DETECTORS = [
    "verbalized", "self_eval", "selfcheck_bertscore", "lexical_similarity", "perplexity", "ln_entropy", "sar",
    "eigenscore", "ccs", "haloscope", "saplma", "mind", "prism", "icr_probe",
    # the field's standard baselines that read only evidence the run already has (no extra model, no extra
    # generation): token probabilities, the K samples (Jaccard graphs, n-grams, ROUGE-L), pooled hidden states
    "msp", "min_probability", "topk_margin", "eigv", "ecc", "deg", "num_sem_sets", "selfcheck_ngram", "cocoa",
    "mahalanobis", "relative_mahalanobis",
    # the next-token distributions' distance from uniform (read while decoding) and the answer's mutual information
    # with its prompt (one extra pass over the answer alone): together under 3% of a default run; RAUQ's per-head
    # attention and topk_margin's top-k are read while decoding, as the entropies are (docs/detectors.md)
    "renyi_divergence", "fisher_rao", "pmi", "cpmi", "rauq",
]
_NLI = ("needs an NLI model; offline the only one is the prompted 135M LLM, which cannot judge entailment, so its "
        "numbers would say nothing")
# the detectors a run without --detector leaves out, and why (said under the results of such a run)
NOT_IN_DEFAULT = {
    "selfcheck_nli": _NLI,
    "semantic_entropy": _NLI,
    "sep": "its training target is semantic entropy, which " + _NLI,
    "kle": "its kernel is built from NLI entailment, which " + _NLI + " (its `jaccard` variant runs offline)",
    "race": "it reads a reasoning model's traces (the default model does not think), and its trace consistency "
            + _NLI,
}


def skipped_detectors(detectors: list[str]) -> dict[str, str]:
    """Detector -> why it did not run, for a run on the default detector list (the user chose no detector)."""
    return dict(NOT_IN_DEFAULT) if list(detectors) == DEFAULT_DETECTORS else {}
