"""HalluEntity (Yeh et al., 2025): entity-level detection on given ChatGPT biographies.

Modules: `dataset` (the registered adapter `halluentity`), `suite` (the registered suite: entity-level metrics and
breakdowns). The units, token evidence and breakdown machinery it uses are the core's.
"""
