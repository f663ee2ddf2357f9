"""Request parameters that differ by model, declared per role that asks an endpoint (target, judge, verdict model and
prompt optimiser, claim extractor): reasoning endpoints refuse `temperature`/`top_p`, want `max_completion_tokens`
instead of `max_tokens`, and take a reasoning effort. Declared, never guessed: what a role sends is what its section
says, the declaration is part of the identity of everything it produces (`identity`), and a server that refuses a
parameter stops the stage with one message naming the setting to change (`refusal_hint`), never a silent retry
without it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]
TokenField = Literal["max_tokens", "max_completion_tokens"]
# the reply budget a role's defaults grow to when its model reasons (declared `params.reasoning`, a reasoning effort
# other than "none", or a local model whose chat template thinks): a thinking block takes hundreds to thousands of
# tokens before the answer, and a reply cut off inside it is a failure, never a verdict
REASONING_REPLY_BUDGET = 4096


class EndpointParams(BaseModel):
    """What a role's requests carry. `temperature`/`top_p` false: never sent (the model runs at its own default;
    a stage that needs a set temperature, such as K samples at temperature 1, is refused before the run);
    `max_tokens_field`: the name of the reply budget; `reasoning_effort`: sent when set."""

    model_config = ConfigDict(extra="forbid")

    temperature: bool = True                      # send `temperature` (false: reasoning endpoints that refuse it)
    top_p: bool = True                            # send `top_p`
    max_tokens_field: TokenField = "max_tokens"   # or max_completion_tokens (OpenAI reasoning models)
    reasoning_effort: ReasoningEffort | None = None  # sent as `reasoning_effort` when set
    reasoning: bool = False                       # declared: the model thinks before it answers (never sent)

    def reasons(self) -> bool:
        """Whether the model is declared to reason: `reasoning: true`, or a reasoning effort other than "none"."""
        return self.reasoning or self.reasoning_effort not in (None, "none")

    def identity(self) -> dict[str, Any] | None:
        """The settings that differ from the defaults (None when none do, so keys made before they existed stay)."""
        changed = {k: v for k, v in self.model_dump().items() if v != EndpointParams.model_fields[k].default}
        return changed or None

    def build(self, *, temperature: float | None, top_p: float | None, max_tokens: int | None) -> dict[str, Any]:
        """The request parameters for what a stage asks, as declared (None = the stage does not set it)."""
        out: dict[str, Any] = {}
        if temperature is not None and self.temperature:
            out["temperature"] = temperature
        if top_p is not None and self.top_p:
            out["top_p"] = top_p
        if max_tokens is not None:
            out[self.max_tokens_field] = max_tokens
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        return out

    def fixed_temperature_refusal(self, temperature: float, section: str) -> str | None:
        """Why a stage that must sample at `temperature` cannot run on an endpoint declared not to take one (None
        when it can)."""
        if self.temperature:
            return None
        return (f"{section}.temperature is false (the endpoint is declared to refuse `temperature`), but the samples "
                f"must be drawn at temperature {temperature:g}")


def reply_budget(set_budget: int | None, default: int, *, reasons: bool) -> int:
    """A role's reply budget: the one its section sets, else its `default` (sized for direct answers), raised to
    `REASONING_REPLY_BUDGET` when the model reasons. A non-reasoning role's budget is its default as before, so the
    keys made with it stay; a reasoning role's is keyed as the larger number it is."""
    if set_budget is not None:
        return set_budget
    return max(default, REASONING_REPLY_BUDGET) if reasons else default


# what to set when a server refuses a parameter: parameter -> (setting under the role's `params` or section, value)
REFUSAL_SETTINGS: dict[str, tuple[str, str]] = {
    "temperature": ("params.temperature", "false"),
    "top_p": ("params.top_p", "false"),
    "max_tokens": ("params.max_tokens_field", "max_completion_tokens"),
    "max_completion_tokens": ("params.max_tokens_field", "max_tokens"),
    "reasoning_effort": ("params.reasoning_effort", "null"),
}


def refusal_hint(param: str, section: str) -> str:
    """The one setting that stops a server refusing `param`, for the role configured in `section`."""
    setting = REFUSAL_SETTINGS.get(param)
    if setting is not None:
        return f"set {section}.{setting[0]}: {setting[1]} and run again (nothing is changed behind your back)"
    other = {"logprobs": "endpoint.logprobs: false", "top_logprobs": "endpoint.logprobs: false",
             "response_format": "judge.json_mode: false", "n": "endpoint.n_samples: calls"}.get(param)
    if other is not None:
        return f"set {other} and run again"
    return f"the model does not accept `{param}`: check {section} and the model's documentation"


def refused_param(named: str | None, message: str, sent: list[str]) -> str | None:
    """Which of the `sent` parameters a 400 refused: the error body's own `param` field when it names one, else the
    longest sent name quoted in the message (`max_completion_tokens` before `max_tokens`); None when none is."""
    if named and named in sent:
        return named
    low = message.lower()
    for name in sorted(sent, key=len, reverse=True):
        if f"'{name}'" in low or f'"{name}"' in low or f"`{name}`" in low:
            return name
    return None


def price_of(prices: dict[str, tuple[float, float]], model: str | None,
             declared: tuple[float | None, float | None] = (None, None)) -> tuple[float | None, float | None]:
    """USD per 1M prompt / completion tokens of `model`: the role's declared prices, else the run's `prices` entry
    for the model (its spec, or the name after a backend prefix such as `openai:`), else (None, None): price
    unknown, never a guessed zero."""
    if declared[0] is not None and declared[1] is not None:
        return declared
    if model is None:
        return None, None
    entry = prices.get(model) or prices.get(model.split(":", 1)[-1])
    return (float(entry[0]), float(entry[1])) if entry else (None, None)


def fill_prices(config: Any) -> Any:
    """A `RunConfig` whose judge section takes its model's price from `prices` where it declares none (the target's,
    the verdict model's and the claim extractor's are looked up where their requests are made)."""
    judge = config.judge
    if config.prices and judge.model and (judge.price_in is None or judge.price_out is None):
        price_in, price_out = price_of(config.prices, judge.model)
        if price_in is not None:
            config.judge = judge.model_copy(update={"price_in": price_in, "price_out": price_out})
    return config
