"""Text handling shared by datasets, judges, detectors and suites: prompt rendering, sentence splitting, spaCy
analyses, unit alignment, verbalized-confidence parsing, long-context fitting, reasoning/answer splitting."""
