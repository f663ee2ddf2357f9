"""A real local HTTP server speaking the Anthropic Messages API (`POST /v1/messages`), with the fault plans of
`mock_openai.FakeOpenAI` (429 with Retry-After, 500, 400, hang, slow, drop per request key), for tests of the
provider backend (`api:anthropic/...`) reached through the multi-provider client with a base URL.

A reply is a `message` whose content is a `thinking` block (`thinking_text`, with a signature) when `thinking` is on,
then a `text` block; `usage` has `input_tokens` / `output_tokens` (`usage` = (input, output)). Errors have
Anthropic's body (`{"type": "error", "error": {"type": "rate_limit_error", "message": ...}}`). Message contents
that arrive as lists of blocks are flattened to text before the key and the content function see them.

Usage (tests/ is on sys.path): `from mock_anthropic import FakeAnthropic`; `with FakeAnthropic() as srv: ...
srv.base_url` (no `/v1`: the Anthropic SDK adds it).
"""

from __future__ import annotations

from typing import Any

from mock_openai import FakeOpenAI, default_key

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               429: "rate_limit_error", 500: "api_error"}


def flatten(body: dict[str, Any]) -> dict[str, Any]:
    """The body with every message's content as one string (text blocks joined)."""
    def text(content: Any) -> str:
        if isinstance(content, str):
            return content
        return "".join(block.get("text", "") for block in content if isinstance(block, dict))

    return {**body, "messages": [{**m, "content": text(m.get("content", ""))} for m in body.get("messages", [])]}


class FakeAnthropic(FakeOpenAI):
    """`FakeOpenAI`'s server and fault plans, answering in the Anthropic Messages format."""

    def __init__(self, **kw: Any) -> None:
        key_of = kw.pop("key_of", default_key)
        super().__init__(key_of=lambda body: key_of(flatten(body)), **kw)
        self.thinking = True
        self.thinking_text = "The user asks a factual question; recall it first."

    def error_body(self, status: int, message: str, param: str | None = None) -> dict[str, Any]:
        return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}

    def completion(self, action: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
        text = self.reply_text(action, flatten(body), 0)
        content: list[dict[str, Any]] = []
        if self.thinking:
            content.append({"type": "thinking", "thinking": self.thinking_text, "signature": "sig-test"})
        content.append({"type": "text", "text": text})
        p, c = self.usage
        return {"id": "msg_test", "type": "message", "role": "assistant", "model": body["model"], "content": content,
                "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": p, "output_tokens": c}}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"
