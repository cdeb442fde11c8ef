"""The approval page's credential is never a cookie (cookies are scoped by host, not port): a page
served by a second local HTTP server on another port of 127.0.0.1, visited in the same browser
context after the user signed in, receives no credential of `perfloop serve`, cannot read its
sessionStorage, and, fetching and posting itself, can neither read a session nor approve; the
real page still reads and answers (a real `perfloop serve`, Debian's chromium)."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext

from tests.web.conftest import Served, shot

pytestmark = pytest.mark.e2e

EVIL = """<!doctype html><html><body><script>
window.result = (async () => {
  const out = {storage: sessionStorage.getItem("perfloop-token"), cookie: document.cookie};
  for (const [name, url, init] of [
    ["read", "TARGET/api/sessions/SID", {credentials: "include"}],
    ["page", "TARGET/sessions/SID", {credentials: "include"}],
    ["post", "TARGET/sessions/SID/approve", {method: "POST", credentials: "include", mode: "no-cors",
      body: new URLSearchParams({number: "0"})}],
  ]) {
    try { const r = await fetch(url, init); out[name] = r.type === "opaque" ? "opaque" : [r.status, await r.text()]; }
    catch (e) { out[name] = "blocked"; }
  }
  return out;
})();
</script></body></html>"""


class Neighbour:
    """Another local service (a second HTTP server on 127.0.0.1, another port) that records the
    Cookie and Authorization headers every request brings it, and serves the attacking page."""

    def __init__(self, page: str) -> None:
        self.seen: list[dict[str, str | None]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                seen.append({"cookie": self.headers.get("Cookie"), "auth": self.headers.get("Authorization")})
                body = page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def served(recorded_home: tuple[Path, str]) -> Iterator[Served]:
    s = Served(recorded_home[0])
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def neighbour(served: Served, recorded_home: tuple[Path, str]) -> Iterator[Neighbour]:
    n = Neighbour(EVIL.replace("TARGET", served.url).replace("SID", recorded_home[1]))
    try:
        yield n
    finally:
        n.close()


def replay(served: Served, path: str, seen: dict[str, str | None], data: bytes | None = None) -> int:
    """What the neighbour can do with what the browser sent it: the same headers, to the server."""
    headers = {k: v for k, v in (("Cookie", seen["cookie"]), ("Authorization", seen["auth"])) if v}
    if data is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        with urllib.request.urlopen(
            urllib.request.Request(served.url + path, data, headers), timeout=30
        ) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_another_port_of_127_0_0_1_gets_nothing_that_reads_or_approves(
    context: BrowserContext, served: Served, recorded_home: tuple[Path, str], neighbour: Neighbour
) -> None:
    """(The real page approving with its header: test_approval_page.py's two-tabs test.)"""
    sid = recorded_home[1]
    page = served.open(context, f"/sessions/{sid}")  # the user, signed in
    assert page.locator("#summary").count() == 1
    assert context.cookies() == []  # no cookie at all
    assert page.evaluate("sessionStorage.getItem('perfloop-token')") == served.token

    evil = context.new_page()
    evil.goto(neighbour.url + "/")
    result = evil.evaluate("window.result")
    shot(evil, "serve-neighbour-port")
    assert result["storage"] is None and result["cookie"] == ""
    for name in ("read", "page"):  # no credential rides along: 401 (or CORS hides it all)
        assert result[name] == "blocked" or result[name][0] == 401, result
    assert neighbour.seen and all(s == {"cookie": None, "auth": None} for s in neighbour.seen), neighbour.seen
    for seen in neighbour.seen:  # whatever the browser sent the neighbour, replayed to the server
        assert replay(served, f"/api/sessions/{sid}", seen) == 401
        assert replay(served, f"/sessions/{sid}", seen) == 401
        assert replay(served, f"/sessions/{sid}/approve", seen, b"number=0") == 401

    # The real page still works: its poll reads the session with the header.
    page.bring_to_front()
    with page.expect_response(lambda r: r.url.endswith(f"/api/sessions/{sid}"), timeout=30_000) as polled:
        pass
    assert polled.value.status == 200
    assert polled.value.request.headers.get("authorization") == f"Bearer {served.token}"
