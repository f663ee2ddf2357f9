"""JSON replies of prompted models: the first JSON object of a reply that validates as a pydantic model.

Shared by every structured ask that wants a JSON object back (HalluLens's builders and judges, the claim verifier):
the parser accepts what models commonly wrap around the object (code fences, a sentence before it) and a reply cut
off by its token budget, read up to its last complete member (never completed or guessed).
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def parse_json(text: str, model: type[M]) -> M:
    """The first JSON object in `text` that validates as `model`; `ValueError` naming the problem otherwise.

    A reply cut off by the token budget (or rambling on past the wanted fields) is read up to its last complete
    member: `{"believes": false, "reasoning": "The reply decl` -> `{"believes": false}`. Only members that are
    complete JSON are kept and the result must still validate, so nothing is completed or guessed (an unfinished
    string or list is never closed)."""
    body = re.sub(r"```(?:json)?", "", text)
    try:
        return _first_object(body, model)
    except ValueError as exc:
        start = body.find("{")
        for cut in sorted((m.start() for m in re.finditer(r',\s*"', body) if m.start() > start), reverse=True):
            try:
                return _first_object(body[start:cut] + "}", model)
            except ValueError:
                continue
        raise exc from None


def _first_object(body: str, model: type[M]) -> M:
    decoder = json.JSONDecoder()
    problem = f"no JSON object in the reply {body[:100]!r}"
    for start in (i for i, c in enumerate(body) if c == "{"):
        try:
            obj, _ = decoder.raw_decode(body[start:])
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        try:
            return model.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            problem = f"field {'.'.join(map(str, err['loc'])) or '?'}: {err['msg']}"
    raise ValueError(problem)


def json_parser(model: type[M]) -> Any:
    """A `Request.parse` for replies validated by `model`."""
    return lambda text: parse_json(text, model)
