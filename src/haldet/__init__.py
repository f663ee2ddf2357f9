"""haldet: benchmark hallucination detectors for LLMs under one fair protocol."""

__version__ = "0.1.0"
