"""Rule judge for function calling (xLAM): the calls in the answer against the expected calls in r+.

A call is `{"name": ..., "arguments": {...}}` (also accepted: "parameters"/"args" for the arguments, and
OpenAI's `{"function": {"name", "arguments": "<json string>"}}`). The answer's calls are read from a fenced
block or the first JSON value in the text. The set of calls must equal the expected set: same function names,
same argument names, values equal after light normalisation (numbers compared as numbers, strings trimmed and
case-folded). An answer with no parseable call is undecided unless it declines.
"""

from __future__ import annotations

import json
import re
from typing import Any

from haldet.judges.base import Judge, Undecided, register
from haldet.judges.text import is_abstention
from haldet.schema import Category, Generation, Instance, Label

_FENCE = re.compile(r"```(?:json|python|tool_call|javascript)?\s*\n?(.*?)```", re.DOTALL)


def _first_json(text: str) -> Any:
    """The first JSON object or array in the text (fenced blocks first), or None."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for cand in candidates:
        for start, char in enumerate(cand):
            if char in "[{":
                try:
                    value, _ = decoder.raw_decode(cand[start:])
                except json.JSONDecodeError:
                    continue
                return value
    return None


def _norm_value(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        stripped = value.strip()
        try:
            return float(stripped)
        except ValueError:
            return stripped.casefold()
    if isinstance(value, list):
        return [_norm_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _norm_value(v) for k, v in sorted(value.items())}
    return value


def parse_calls(value: Any) -> list[tuple[str, str]] | None:
    """Canonical (name, arguments JSON) pairs of a call or list of calls, or None when it is not one."""
    if isinstance(value, dict) and "tool_calls" in value:
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict):
            return None
        if isinstance(item.get("function"), dict):
            item = item["function"]
        name = item.get("name")
        args: Any = next((item[k] for k in ("arguments", "parameters", "args") if k in item), {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                return None
        if not isinstance(name, str) or not isinstance(args, dict):
            return None
        calls.append((name.strip(), json.dumps(_norm_value(args), sort_keys=True)))
    return sorted(calls)


@register("rule:tool_call")
class ToolCallJudge(Judge):
    def applies(self, instance: Instance) -> bool:
        return instance.task_type == "tool_call" and self._expected(instance) is not None

    @staticmethod
    def _expected(instance: Instance) -> list[tuple[str, str]] | None:
        expected: list[tuple[str, str]] = []
        for ref in instance.references:
            try:
                calls = parse_calls(json.loads(ref))
            except json.JSONDecodeError:
                return None
            if calls is None:
                return None
            expected += calls
        return sorted(expected) if instance.references else None

    def judge(self, instance: Instance, generation: Generation) -> Label | Undecided:
        answer = generation.response.strip()
        if not answer:
            return self.label(instance, Category.INVALID, "empty response")
        expected = self._expected(instance) or []
        found = _first_json(answer)
        calls = parse_calls(found) if found is not None else None
        if calls is None:
            if is_abstention(answer):
                return self.label(instance, Category.ABSTENTION, "the answer declines to call a tool")
            return Undecided("rule:tool_call: no parseable function call in the answer")
        if calls == expected:
            return self.label(instance, Category.CORRECT, f"calls match the expected {len(expected)} call(s)")
        want_names = sorted(n for n, _ in expected)
        got_names = sorted(n for n, _ in calls)
        if want_names != got_names:
            why = f"called {got_names}, expected {want_names}"
        else:
            wrong = [n for (n, a), (_, b) in zip(calls, expected, strict=True) if a != b]
            why = f"arguments of {wrong} differ from the expected ones"
        return self.label(instance, Category.HALLUCINATION, why)
