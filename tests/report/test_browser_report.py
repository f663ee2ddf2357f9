"""The HTML report renders in a real headless Chromium with no console error, and its screenshot is not blank.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: the browser reads commands on
fd 3 and writes replies/events on fd 4, NUL-separated JSON), so console errors, uncaught exceptions and failed
resource loads (a CDN the report should never reference) are all observed as events. A negative control checks
that the harness does catch an error.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from repo_paths import FIXTURES

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FIXTURE = FIXTURES / "run_fixture"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian package chromium is not installed (make test installs it)")


class Browser:
    """A headless Chromium page driven over the DevTools pipe."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 1800) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # in the child: fd 3 = commands in, fd 4 = replies out
            high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)  # out of the way of 3 and 4 first
            high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=wire,
            close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.width, self.height = width, height

    def _send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> int:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        return self._id

    def _read(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe: "
                                   + (self.proc.stderr.read().decode(errors="replace")[-2000:]
                                      if self.proc.poll() is not None and self.proc.stderr else ""))
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 60) -> dict[str, Any]:
        wanted = self._send(method, params, session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._read(deadline - time.monotonic())
            if msg is None:
                break
            if msg.get("id") == wanted:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)
        raise TimeoutError(method)

    def wait_event(self, method: str, timeout: float = 60) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._read(deadline - time.monotonic())
            if msg is None:
                break
            self.events.append(msg)
            if msg.get("method") == method:
                return msg
        raise TimeoutError(method)

    def open(self, url: str) -> tuple[list[str], bytes]:
        """Load `url`; return (console/log/exception errors, PNG screenshot of the viewport)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime.enable", "Log.enable", "Page.enable", "Network.enable"):
            self.call(domain, session=session)
        self.call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False}, session=session)
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired")
        time.sleep(0.5)  # let late console messages arrive
        png = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"}, session=session)["data"])
        errors = []
        for ev in self.events:
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                     for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                errors.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:300])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}")
            elif method == "Network.loadingFailed":
                errors.append(f"network: {params.get('errorText')}")
        return errors, png

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._send("Browser.close")
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


def _not_blank(png: bytes) -> tuple[int, float]:
    """(distinct colours, share of non-white pixels) of a screenshot."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    small = img.resize((img.width // 4, img.height // 4))
    pixels = list(small.getdata())
    colours = len(set(pixels))
    ink = sum(1 for p in pixels if min(p) < 240) / len(pixels)
    return colours, ink


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> Path:
    from haldet.report.build import report_runs

    out = tmp_path_factory.mktemp("report")
    report_runs([FIXTURE], out, n_boot=100)
    return out / "report.html"


def test_report_renders_without_console_errors(browser, report_html):
    html = report_html.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")  # a namespace, not a fetch
    assert "<script" not in html and "http://" not in html and "https://" not in html  # self-contained
    errors, png = browser.open(report_html.as_uri())
    assert errors == []
    colours, ink = _not_blank(png)
    assert colours > 20 and ink > 0.02, (colours, ink)


def test_harness_catches_errors_and_blank_pages(browser, tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><link rel=icon href='data:,'></head><body>"
                   "<script>console.error('boom'); undefinedFunction();</script></body></html>")
    errors, png = browser.open(bad.as_uri())
    assert any("boom" in e for e in errors) and any("exception" in e for e in errors)
    _colours, ink = _not_blank(png)
    assert ink < 0.001  # an empty page is blank: the non-blank check means something
