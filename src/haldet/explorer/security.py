"""What keeps the explorer safe on a shared machine: it answers only the host names it was started for (a page on
another site cannot reach it through DNS rebinding: the browser would send that site's name as Host) and every
response carries headers that forbid sniffing, framing and any script or style not served by the explorer itself.

The pages need nothing more: scripts and styles come from /static, and the curve data is an inline JSON block,
which a browser treats as data, never as script."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Iterable

from fastapi import FastAPI, Request, Response
from starlette.middleware.trustedhost import TrustedHostMiddleware

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")  # as a Host header names them (IPv6 in brackets)
WILDCARD_BINDS = ("0.0.0.0", "::", "")

CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
))
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def allowed_hosts(bind_host: str, extra: Iterable[str] = ()) -> list[str]:
    """The Host names a request may carry: loopback names, the address the explorer listens on and, when it listens
    on every interface, this machine's own names; plus what the user allowed with `--allow-host`."""
    hosts = list(LOOPBACK_NAMES)
    if bind_host in WILDCARD_BINDS:
        name = socket.gethostname()
        hosts += [name, socket.getfqdn(name)]
    else:
        hosts.append(bind_host)
    hosts += [h.strip() for h in extra if h.strip()]
    return list(dict.fromkeys(_as_host_header(h.lower()) for h in hosts))


def _as_host_header(name: str) -> str:
    """An IPv6 literal as a Host header carries it: in brackets."""
    return f"[{name}]" if ":" in name and not name.startswith("[") else name


def protect(app: FastAPI, hosts: Iterable[str]) -> None:
    """Refuse a foreign Host (400) and add the protective headers to every response, error pages included."""

    @app.middleware("http")
    async def protective_headers(request: Request,
                                 call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    # added last, so it runs first: a foreign Host gets a plain-text 400 that holds nothing of the runs
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(hosts), www_redirect=False)
