"""Hallucination detectors, one module per method, each registered by name (`base` holds the Detector class and
its registry). Modules starting with an underscore are package-private helpers the registry does not scan."""
