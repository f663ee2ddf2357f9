"""Prices from genai-prices where none is declared (haldet.model_prices): a known model's USD by hand from the
per-token prices the library lists, an unknown one (or a local server) "price unknown" with the reason, a declared
price winning, and the source carried into the usage reports."""

from __future__ import annotations

import genai_prices
import pytest

from haldet.backends.openai_client import Usage
from haldet.config import RunConfig
from haldet.model_prices import CONFIG_SOURCE, resolve_price

# genai-prices 0.2.3 lists claude-haiku-4-5 at USD 1 per 1M input and USD 5 per 1M output tokens
HAIKU = "api:anthropic/claude-haiku-4-5"


def test_a_listed_model_is_priced_by_the_library_and_says_so() -> None:
    price = resolve_price({}, HAIKU)
    assert (price.price_in, price.price_out) == (1.0, 5.0)
    assert price.source == f"genai-prices {genai_prices.__version__} (anthropic/claude-haiku-4-5)"
    usage = Usage(prompt_tokens=2000, completion_tokens=300)
    assert usage.cost_usd(price.price_in, price.price_out) == pytest.approx(2000 * 1e-6 + 300 * 5e-6)  # 0.0035
    # the library's own calculation agrees
    own = genai_prices.calc_price(genai_prices.Usage(input_tokens=2000, output_tokens=300), "claude-haiku-4-5",
                                  provider_id="anthropic")
    assert float(own.total_price) == pytest.approx(0.0035)
    # an OpenAI-compatible name with no base_url is the OpenAI API's model
    assert resolve_price({}, "openai:gpt-4o-mini").source.startswith("genai-prices")


def test_an_unlisted_model_or_a_local_server_has_no_price_and_a_reason() -> None:
    price = resolve_price({}, "openai:tiny-thinker")
    assert not price.known and price.price_in is None
    assert price.source.startswith("price unknown: not declared, and genai-prices")
    assert "tiny-thinker" in price.source and "prices:" in price.source
    # an open-weight model behind a local server is not priced as some host's
    local = resolve_price({}, "openai:gpt-4o-mini", base_url="http://127.0.0.1:8080/v1")
    assert not local.known and "http://127.0.0.1:8080/v1" in local.source


def test_a_declared_price_wins_over_the_library() -> None:
    assert resolve_price({HAIKU: (9.0, 9.0)}, HAIKU) == resolve_price({}, HAIKU, (9.0, 9.0))
    assert resolve_price({}, HAIKU, (9.0, 9.0)).source == CONFIG_SOURCE
    assert resolve_price({}, HAIKU, (9.0, 9.0)).price_out == 9.0


def test_usage_reports_name_the_price_source() -> None:
    from haldet.backends.select import priced_endpoint
    from haldet.backends.structured import ClientSettings, StructuredClient

    endpoint, source = priced_endpoint("openai:gpt-4o-mini", RunConfig())
    assert endpoint.price_in == float(resolve_price({}, "gpt-4o-mini").price_in or -1) and "genai-prices" in source
    assert priced_endpoint("openai:gpt-4o-mini", RunConfig(prices={"gpt-4o-mini": (2.0, 3.0)}))[1] == CONFIG_SOURCE
    client = StructuredClient(ClientSettings(model=HAIKU), correction=str)
    assert (client.settings.price_in, client.settings.price_out) == (1.0, 5.0) and "genai-prices" in client.price_source
    unknown = StructuredClient(ClientSettings(model="judge-x", base_url="http://127.0.0.1:9/v1"), correction=str)
    assert unknown.settings.price_in is None and unknown.price_source.startswith("price unknown")
    # a verdict or claim record's billing names what made its USD
    from haldet.backends.structured import Reply, billing

    billed = billing([Reply("x", "x", prompt_tokens=2000, completion_tokens=300, cost_usd=0.0035,
                            price_source=client.price_source)])
    assert billed["cost_usd"] == 0.0035 and billed["price_source"] == client.price_source
