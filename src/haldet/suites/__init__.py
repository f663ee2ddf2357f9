"""Hosted benchmarks: `base` (the Suite class and registry), `report`, and one folder per suite.

A suite folder holds everything that is only that benchmark's: its dataset adapter(s), its own detectors, its
protocol, metrics and report, and the registered Suite (`suite.py`). The registries import every module of every
folder by name (`haldet.registry`), so nothing in the core imports a suite.
"""
