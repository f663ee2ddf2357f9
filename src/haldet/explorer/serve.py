"""Serving the explorer: a socket bound before the server starts (so the printed URL names the real port, a free
one by default), uvicorn on it, and a clean stop on Ctrl-C."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

from haldet.errors import HaldetError

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one. A taken port is a user error naming it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise HaldetError(f"cannot listen on {host}:{port} ({exc.strerror})", where="--host/--port",
                          hint="leave --port out to use a free port") from None
    sock.listen(128)
    return sock


def serve(runs: Sequence[Path], host: str = LOOPBACK, port: int = 0,
          on_ready: Callable[[str], None] = print, allow_hosts: Sequence[str] = ()) -> None:
    """Serve the explorer over `runs` until interrupted; `on_ready` gets progress lines, then the URL. Requests
    must name this host (or a loopback name, or one of `allow_hosts`) in their Host header."""
    import uvicorn

    from haldet.explorer.app import create_app  # lazy: sklearn, scipy
    from haldet.explorer.data import Explorer  # lazy: h5py, pyarrow
    from haldet.explorer.security import allowed_hosts  # lazy: fastapi

    explorer = Explorer(runs)
    sock = bind(host, port)
    for cell in explorer.cells():  # read every cell's logs once now, so the first page a user opens is fast
        on_ready(f"reading {cell.run.name}: {cell.dataset} x {cell.model}")
        cell.preload()
    app = create_app(explorer, allowed_hosts(host, allow_hosts))
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    on_ready(f"http://{shown}:{actual}/")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
