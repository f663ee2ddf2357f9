"""Dataset adapters, one module per source: each maps its rows into `Instance`s and registers itself in the
dataset registry of `base` (suites add their own adapters in their folders)."""
