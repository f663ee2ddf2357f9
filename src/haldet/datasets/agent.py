"""xLAM function calling (Salesforce/xlam-function-calling-60k): tool specs as context, expected calls as r+.

`query`, `tools` and `answers` are JSON strings in the source; the decoded tools and calls go to meta and the
reference is the calls re-serialised canonically (sorted keys), so a judge can compare parsed calls.
"""

from __future__ import annotations

import json
from typing import Any

from haldet.datasets.adapter import DatasetAdapter
from haldet.datasets.base import register
from haldet.datasets.rows import BadRow, require, require_json
from haldet.schema import Instance


def canonical_calls(calls: Any) -> str:
    return json.dumps(calls, sort_keys=True, ensure_ascii=False)


@register("xlam")
class XLAM(DatasetAdapter):
    scenario = "agent"
    task_type = "tool_call"
    source = "Salesforce/xlam-function-calling-60k (gated)"
    license = "CC BY 4.0 (research use)"
    hub_id = "Salesforce/xlam-function-calling-60k"
    split_order = ("test", "train")
    required_fields = ("id", "query", "tools", "answers")

    def row_to_instance(self, row: dict[str, Any], index: int, split: str) -> Instance:
        tools = require_json(row, "tools")
        calls = require_json(row, "answers")
        if not isinstance(tools, list):
            raise BadRow("tools", "must be a JSON list of tool specifications")
        if not isinstance(calls, list) or not all(isinstance(c, dict) and "name" in c for c in calls):
            raise BadRow("answers", "must be a JSON list of calls with 'name' and 'arguments'")
        return self.instance(
            split, row.get("id") if row.get("id") is not None else index,
            instruction=('You can call the tools listed in the context. Reply with the call(s) that fulfil the '
                         'request as a JSON list of objects with "name" and "arguments". If no tool fits, '
                         'answer directly.'),
            context="Available tools:\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools),
            question=str(require(row, "query")), references=[canonical_calls(calls)],
            meta={"tools": tools, "calls": calls, "tool_names": [t.get("name") for t in tools if isinstance(t, dict)]})
