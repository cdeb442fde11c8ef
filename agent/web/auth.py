"""Who may use the approval page: a token on a non-loopback bind, and CSRF-safe POSTs.

With a token, every request must carry it: `?token=` (the first visit; it is then kept in an
HttpOnly, SameSite=Strict cookie and the address is cleaned), the cookie, or `Authorization: Bearer`.
Every POST carries the page's CSRF value (an HMAC of the server's secret: another site cannot read
it) and, when the browser sends one, an Origin equal to the page's own."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp

COOKIE = "perfloop_token"


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


class Guard:
    """The server's token (None: loopback, no token) and its CSRF secret."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self._secret = secrets.token_bytes(32)

    def csrf(self) -> str:
        """The value every form posts back."""
        return hmac.new(self._secret, b"perfloop-csrf", hashlib.sha256).hexdigest()

    def csrf_ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value, self.csrf())

    def token_ok(self, value: str | None) -> bool:
        return self.token is None or (value is not None and hmac.compare_digest(value, self.token))


class TokenMiddleware(BaseHTTPMiddleware):
    """Refuses (401) any request without the token; POSTs from another origin are refused (403)."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        super().__init__(app)
        self.guard = guard

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        g = self.guard
        query = request.query_params.get("token")
        if g.token is not None and query is not None and g.token_ok(query):
            clean = request.url.remove_query_params("token")
            resp = RedirectResponse(str(clean.path) + (f"?{clean.query}" if clean.query else ""), 303)
            resp.set_cookie(COOKIE, query, httponly=True, samesite="strict")
            return resp
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip() or None
        if not (g.token_ok(request.cookies.get(COOKIE)) or g.token_ok(bearer)):
            return PlainTextResponse(
                "401: this perfloop server needs its token: open the address `perfloop serve` printed "
                "(…/?token=…) or send `Authorization: Bearer TOKEN`",
                status_code=401,
            )
        origin = request.headers.get("origin")
        if request.method == "POST" and origin is not None and origin != _own_origin(request):
            return PlainTextResponse(
                f"403: a POST from another origin ({origin}) is refused", status_code=403
            )
        return await call_next(request)


def _own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', '')}"
