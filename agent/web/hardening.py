"""What every response of `perfloop serve` carries, and the limits of its HTTP server.

Headers on every response (the app's own, its refusals and Starlette's 404/405/500 alike): a CSP
that runs only the page's own nonce'd script, fetches only from this origin and cannot be framed
(`frame-ancestors 'none'`: no clickjacking of the one-click Approve), `nosniff`, `no-store`,
`no-referrer` (the `?token=` address never leaves in a Referer). Styles may be inline: the
report's matplotlib SVGs style their elements with attributes, which a nonce cannot cover; with
`default-src 'none'` no style can fetch anything, so an inline style leaks nothing.

The server (uvicorn, HTTP/1.1 by h11): headers at most 16 KiB (`h11_max_incomplete_event_size`),
at most `LIMIT_CONCURRENCY` connections and requests at once (`limit_concurrency`, past it a 503),
idle keep-alive closed after 5 s (`timeout_keep_alive`), proxy headers ignored (no `X-Forwarded-*`
may change who or where a request is). uvicorn has no timeout for a request still being sent (its
keep-alive timer stops at the first byte: half-sent headers held a connection for good), so
`TimedH11` adds two: a connection that sends nothing for `IDLE_S` seconds after it opened or after
its last response is closed, and one whose request is not fully received `REQUEST_S` seconds
after that. Idle sockets opened without a token (anyone on the machine may open them) are thus
dropped within seconds, and the limit is far above what a browser opens: 64 of them held open
leave the server answering its user at once (tests/integration/test_low_hardening.py)."""

from __future__ import annotations

import asyncio
import re
import secrets

import h11
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

IDLE_S = 3.0
REQUEST_S = 10.0
LIMIT_CONCURRENCY = 512
MAX_HEADER_BYTES = 16 * 1024


def csp(nonce: str) -> str:
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    )


HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
FILE_CSP = "default-src 'none'; sandbox; frame-ancestors 'none'"
"""For the session's own files: shown, never run (an .html or .svg there stays inert)."""


PAGE_NONCE = re.compile(rb"[A-Za-z0-9_-]{16,64}")


def nonce_of(scope: Scope) -> str:
    return str(scope.get("state", {}).get("csp_nonce", ""))


class Hardened:
    """Adds the headers to every HTTP response of `app` (the outermost layer)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(18)
        for name, value in scope.get("headers", []):
            # The sign-in shell fetches its page and writes it into itself: that page's scripts
            # carry the shell's own nonce (all they hold is escaped, so knowing it injects nothing).
            if name == b"x-perfloop-nonce" and PAGE_NONCE.fullmatch(value):
                nonce = value.decode()
        scope.setdefault("state", {})["csp_nonce"] = nonce

        async def send_hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
                if "content-security-policy" not in headers:
                    headers["Content-Security-Policy"] = csp(nonce)
                if "content-type" not in headers:
                    headers["Content-Type"] = "text/plain; charset=utf-8"
            await send(message)

        await self.app(scope, receive, send_hardened)


class TimedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for receiving each request in full."""

    _deadline: asyncio.TimerHandle | None = None

    _heard = False
    _armed_at = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._heard = True
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's reply to a request h11 cannot read, with the headers every response has."""
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
        headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
        headers.append((b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"))
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=b"400: this is not an HTTP request this server can read\n"),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._heard, self._armed_at = False, self.loop.time()
        self._deadline = self.loop.call_later(IDLE_S, self._expire)

    def _expire(self) -> None:
        """Close the connection if it sent nothing for `IDLE_S`, or if a request is still being
        sent (partial headers, or a body not all there) `REQUEST_S` after it was armed."""
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            return
        left = REQUEST_S - (self.loop.time() - self._armed_at)
        if self._heard and left > 0:
            self._deadline = self.loop.call_later(left, self._expire)
            return
        self.transport.close()


def server_options() -> dict:
    """The uvicorn.Config options of `perfloop serve` besides the app."""
    return {
        "http": TimedH11,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
        "limit_concurrency": LIMIT_CONCURRENCY,
        "timeout_keep_alive": 5,
        "proxy_headers": False,
        "server_header": False,
        "access_log": False,
        "log_level": "warning",
        "lifespan": "off",
    }
