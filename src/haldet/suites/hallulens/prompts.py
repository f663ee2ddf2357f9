"""HalluLens prompt texts (packaged `templates/hallulens.yaml`, overridable by a user file) and the parsers of
the structured replies they ask for.

Every reply is a JSON object validated by a pydantic model; the parsers also accept what models commonly wrap
around it (code fences, a sentence before it). The correctness verdict additionally accepts a bare label in any
case with punctuation or markdown ("CORRECT.", "**Incorrect**"): a reply naming exactly one of the three labels
is that label; anything else (no label, two labels) is malformed and retried, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from haldet.backends.structured import Request
from haldet.config import digest
from haldet.errors import HaldetError, unknown_keys
from haldet.judges.json_reply import parse_json
from haldet.text.templates import packaged_template

KEYS = ("qa_question", "qa_answer", "long_question", "long_answer", "entity_names", "entity_combine",
        "describe_prompts", "abstention", "correctness", "belief", "claims", "verify")
# reply budgets (tokens) per prompt: enough for the requested JSON, short enough that a rambling model stops
BUDGETS = {"qa_question": 80, "qa_answer": 64, "long_question": 80, "long_answer": 384, "entity_names": 128,
           "entity_combine": 128,
           "abstention": 128, "correctness": 128, "belief": 128, "claims": 192, "verify": 128}


class Prompts:
    """The prompt set in use (packaged texts, each key replaceable from a user YAML file)."""

    def __init__(self, override: str | Path | None = None) -> None:
        import jinja2

        texts: dict[str, Any] = yaml.safe_load(packaged_template("hallulens.yaml"))
        if override:
            path = Path(override)
            try:
                user = yaml.safe_load(path.read_text()) or {}
            except OSError as exc:
                raise HaldetError(f"cannot read the prompt file: {exc.strerror}", where=str(path)) from None
            except yaml.YAMLError:
                raise HaldetError("the prompt file is not valid YAML", where=str(path)) from None
            unknown = sorted(set(user) - set(KEYS)) if isinstance(user, dict) else ["(not a mapping)"]
            if unknown:
                raise HaldetError(unknown_keys("prompt key(s)", unknown, KEYS), where=str(path),
                                  hint=f"known keys: {', '.join(KEYS)}")
            texts.update(user)
        env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
        self.texts = texts
        self.digest = digest(texts)
        self._templates = {k: env.from_string(v) for k, v in texts.items() if isinstance(v, str)}
        self.describe = [env.from_string(t) for t in texts["describe_prompts"]]

    def render(self, key: str, **fields: Any) -> str:
        return self._templates[key].render(**fields).strip()

    def user(self, key: str, **fields: Any) -> list[dict[str, str]]:
        """One user turn holding the rendered prompt."""
        return [{"role": "user", "content": self.render(key, **fields)}]

    def request(self, key: str, parse: Callable[[str], Any], prefill: str = "", **fields: Any) -> Request[Any]:
        """A structured call with the prompt `key` rendered with `fields` and that prompt's reply budget."""
        return Request(self.user(key, **fields), parse, prefill=prefill, max_tokens=BUDGETS.get(key))


# --- reply models -------------------------------------------------------------------------------------------------
class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class QuestionReply(_Reply):
    question: str | None

    @field_validator("question")
    @classmethod
    def _clean(cls, value: str | None) -> str | None:
        return value.strip() if value and value.strip() else None


class AnswerReply(_Reply):
    answerable: bool
    answer: str = ""


class NamesReply(_Reply):
    names: list[str]


class AbstentionReply(_Reply):
    reasoning: str = ""
    abstains: bool


class CorrectnessReply(_Reply):
    reasoning: str = ""
    verdict: Literal["CORRECT", "INCORRECT", "UNVERIFIABLE"]

    @field_validator("verdict", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().strip(".*").upper() if isinstance(value, str) else value


class BeliefReply(_Reply):
    reasoning: str = ""
    believes: bool


class ClaimsReply(_Reply):
    claims: list[str] = Field(default_factory=list)


_LABEL = re.compile(r"\b(UNVERIFIABLE|INCORRECT|CORRECT)\b", re.IGNORECASE)


def parse_correctness(text: str) -> CorrectnessReply:
    """A correctness verdict: the JSON reply, or a bare reply naming exactly one label ("CORRECT.", "Incorrect")."""
    try:
        return parse_json(text, CorrectnessReply)
    except ValueError as exc:
        found = {m.upper() for m in _LABEL.findall(text)}
        if len(found) == 1:
            return CorrectnessReply.model_validate({"reasoning": "", "verdict": found.pop()})
        why = "names several verdicts" if found else str(exc)
        raise ValueError(f"no single verdict: {why}") from None
