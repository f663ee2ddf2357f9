"""Your own responses: score answers you already have (your application's, another benchmark's) with any detector.

Modules: `dataset` (the registered adapter `responses`: a JSONL/CSV/Parquet file or a DataFrame of prompt, response
and optional context, label, units), `suite` (the registered suite: the responses are teacher-forced through the
model like every given response; every item is scored when nothing is fitted; metrics where labels are given).
The API (`haldet.score_responses`) and `haldet run --responses FILE` build its config (`haldet.commands.responses`).
"""
