"""What a hosted model's tokens cost, and what said so. A price the user declares (a role's `price_in`/`price_out`,
the run's `prices` table) wins; else the price is looked up in pydantic's `genai-prices` (a maintained table of
provider prices, shipped as a data snapshot inside the package: no network) by the provider and the model name;
else it is unknown, with the reason. Every price carries its `source` ("config", "genai-prices VERSION
(provider/model)", or "price unknown: why"), so a money number says what made it.

The provider is taken from the model spec (`api:PROVIDER/MODEL`) or the endpoint's URL (`openai:NAME` and the
judge's OpenAI-compatible endpoint: the OpenAI API when no `base_url` is set); a local server's URL matches no
provider, so an open-weight model served locally is never priced as some host's. Prices that depend on the
prompt length (tiers) are not reduced to one number: that price is unknown, with the setting to declare.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

CONFIG_SOURCE = "config"
UNKNOWN = "price unknown"
LIBRARY = "genai-prices"


@dataclass(frozen=True)
class Price:
    """USD per 1M prompt / completion tokens (None: unknown) and what said so."""

    price_in: float | None
    price_out: float | None
    source: str

    @property
    def known(self) -> bool:
        return self.price_in is not None and self.price_out is not None


def unknown(reason: str) -> Price:
    return Price(None, None, f"{UNKNOWN}: {reason}")


def resolve_price(prices: dict[str, tuple[float, float]], model: str | None,
                  declared: tuple[float | None, float | None] = (None, None), *,
                  base_url: str | None = None) -> Price:
    """`model`'s price: the role's declared prices, else the run's `prices` entry (its spec, or the name after a
    backend prefix such as `openai:`), else genai-prices' (see the module doc), else unknown with the reason."""
    if declared[0] is not None and declared[1] is not None:
        return Price(float(declared[0]), float(declared[1]), CONFIG_SOURCE)
    if model is None:
        return unknown("no model")
    entry = prices.get(model) or prices.get(model.split(":", 1)[-1])
    if entry:
        return Price(float(entry[0]), float(entry[1]), CONFIG_SOURCE)
    return library_price(model, base_url)


def provider_and_name(model: str) -> tuple[str | None, str]:
    """(genai-prices provider id or None, model name) of a model spec: `api:anthropic/claude-haiku-4-5` ->
    ("anthropic", "claude-haiku-4-5"); `openai:gpt-4o-mini` and a bare endpoint name -> (None, the name)."""
    if model.startswith("api:"):
        provider, _, name = model[len("api:"):].partition("/")
        return ({"gemini": "google", "vertexai": "google"}.get(provider, provider) or None), name
    return None, model.removeprefix("openai:")


def library_price(model: str, base_url: str | None) -> Price:
    """genai-prices' price of `model` at `base_url` (None: the provider's own API), or unknown with the reason."""
    try:
        from genai_prices import __version__
        from genai_prices.data_snapshot import get_snapshot
    except ImportError:
        return unknown("not declared (price_in/price_out or `prices`), and genai-prices is not installed "
                       "(pip install 'haldet[providers]')")
    provider_id, name = provider_and_name(model)
    url = None if provider_id else base_url
    if provider_id is None and url is None:
        provider_id = "openai"  # an OpenAI-compatible client with no base_url calls the OpenAI API
    try:
        provider, info = get_snapshot().find_provider_model(name, None, provider_id, url)
    except LookupError as err:
        where = f"provider {provider_id}" if provider_id else f"endpoint {url}"
        return unknown(f"not declared, and genai-prices {__version__} does not list {name!r} at {where} ({err}); "
                       f"declare `prices: {{{model}: [IN, OUT]}}` (USD per 1M tokens)")
    listed = info.get_prices(datetime.now(tz=UTC))
    per_in, per_out = getattr(listed, "input_mtok", None), getattr(listed, "output_mtok", None)
    if not isinstance(per_in, Decimal) or not isinstance(per_out, Decimal):
        return unknown(f"genai-prices {__version__} lists no single per-token price for {provider.id}/{info.id} "
                       f"(tiered or missing); declare `prices: {{{model}: [IN, OUT]}}` (USD per 1M tokens)")
    return Price(float(per_in), float(per_out), f"{LIBRARY} {__version__} ({provider.id}/{info.id})")


def price_record(price: Price) -> dict[str, Any]:
    """The price as a usage report states it."""
    return {"price_in": price.price_in, "price_out": price.price_out, "price_source": price.source}
