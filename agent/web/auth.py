"""Who may use the approval page, on the model of Jupyter Server: a token even on loopback, the
`Host` header checked against DNS rebinding, the allowed Origin fixed from the bind.

- `Host` must be one the server is reached at: the bound address, `localhost`, `127.0.0.1` or
  `[::1]`, with the port (a wildcard bind adds this machine's names; `--origin` adds an SSH tunnel's
  or a TLS proxy's address). A page on another name that resolves here (DNS rebinding) is refused.
- Every request carries the token as `Authorization: Bearer TOKEN`, compared as bytes in constant
  time (any header value: never an error). No cookie grants anything: cookies are scoped by host,
  not port, so one set here would reach every other service of 127.0.0.1 the browser visits. The
  browser keeps the token in `sessionStorage` (per origin: host *and* port) and sends it as that
  header: a navigation without it (a link, a reload, the printed address `/#token=...`, whose
  fragment never leaves the browser) gets the sign-in shell (agent/web/shell.py, status 401, no
  session data), whose script fetches the page with the header and shows it.
- A POST's Origin, when the browser sends one, is one of the fixed origins (never built from the
  request), and `Sec-Fetch-Site`, when sent, says same-origin (`Guard.own_post`). The CSRF value
  (an HMAC of the server's secret) is checked by the route (agent/web/app.py)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.web.hardening import nonce_of
from agent.web.shell import sign_in
from tools.errors import ConfigError

MAX_SECRET = 1024  # a longer token, cookie or CSRF value is wrong without looking further


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def new_token() -> str:
    return secrets.token_urlsafe(24)


def checked_token(token: str, source: str) -> str:
    """`token` if it is a usable one (16+ printable characters, no spaces); else ConfigError."""
    token = token.strip()
    if len(token) < 16 or len(token) > MAX_SECRET or not token.isprintable() or " " in token:
        raise ConfigError(f"{source}: a token is 16 to {MAX_SECRET} printable characters without spaces")
    return token


def netloc(host: str, port: int) -> str:
    """`host:port` as a browser writes it in `Host` (IPv6 in brackets, the default port left out)."""
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return name.lower() if port == 80 else f"{name.lower()}:{port}"


def _machine_names() -> set[str]:
    """This machine's names and addresses, for a wildcard bind (best effort: no network lookups
    beyond the resolver's view of its own name)."""
    names = {socket.gethostname(), socket.getfqdn()}
    try:
        names |= {str(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        pass
    return {n for n in names if n}


def allowed(bind: str, port: int, extra: Iterable[str] = ()) -> tuple[frozenset[str], frozenset[str]]:
    """The `Host` values and the Origins accepted by a server bound to `bind:port`; `extra` are
    further addresses it is opened at (`--origin URL`: an SSH tunnel's port, a TLS proxy)."""
    names = {"localhost", "127.0.0.1", "::1", bind}
    if is_wildcard(bind):
        names |= _machine_names()
    hosts = {netloc(n, port) for n in names if n}
    origins = {f"http://{h}" for h in hosts}
    for url in extra:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ConfigError(f"--origin: {url!r} is not an address like http://localhost:9000")
        default = 80 if parts.scheme == "http" else 443
        where = netloc(parts.hostname, parts.port or default)
        if parts.scheme == "https" and (parts.port or 443) == 443:
            where = where.removesuffix(":443")
        hosts.add(where)
        origins.add(f"{parts.scheme}://{where}")
    return frozenset(hosts), frozenset(origins)


def same(value: str | None, expected: bytes) -> bool:
    """`value` equals `expected`, compared as bytes in constant time; any string is fine."""
    if value is None or len(value) > MAX_SECRET:
        return False
    return hmac.compare_digest(value.encode("utf-8", "surrogatepass"), expected)


class Guard:
    """The server's token, the names it answers to, and its per-run secrets."""

    def __init__(self, token: str, port: int, hosts: frozenset[str], origins: frozenset[str]) -> None:
        self.port, self.hosts, self.origins = port, hosts, origins
        self._token = token.encode()
        self._secret = secrets.token_bytes(32)

    def csrf(self) -> str:
        """The value every form posts back."""
        return hmac.new(self._secret, b"perfloop-csrf", hashlib.sha256).hexdigest()

    def csrf_ok(self, value: str | None) -> bool:
        return same(value, self.csrf().encode())

    def token_ok(self, value: str | None) -> bool:
        return same(value, self._token)

    def signed_in(self, request: Request) -> bool:
        auth = request.headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        return self.token_ok(bearer)

    def refusal(self, request: Request) -> Response | None:
        """Why this request is refused (a response that echoes nothing), or None. A page asked for
        without the token gets the sign-in shell (it holds no session data)."""
        if request.headers.get("host", "").lower() not in self.hosts:
            return _plain(403, "this server answers only at the address `perfloop serve` printed")
        if not self.signed_in(request):
            if request.method in ("GET", "HEAD") and not request.url.path.startswith("/api/"):
                return sign_in(nonce_of(request.scope))
            return _plain(
                401,
                "this perfloop server needs its token: open the address `perfloop serve` printed "
                "(.../#token=...) or send `Authorization: Bearer TOKEN`",
            )
        if request.method not in ("GET", "HEAD") and not self.own_post(request):
            return _plain(403, "a POST from another origin is refused")
        return None

    def own_post(self, request: Request) -> bool:
        """Whether a POST comes from this server's own pages. The Origin, when sent, is one of the
        fixed origins; `null` only with `Sec-Fetch-Site: same-origin`: our `Referrer-Policy:
        no-referrer` makes browsers send `Origin: null` on our own forms, and a sandboxed or opaque
        page elsewhere sends `null` too, but never with same-origin. A client sending neither
        header (curl with the token) passes here; the CSRF value is checked next."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            return False
        origin = request.headers.get("origin")
        if origin == "null":
            return site == "same-origin"
        return origin is None or origin.lower() in self.origins


def _plain(status: int, text: str) -> Response:
    return PlainTextResponse(f"{status}: {text}\n", status_code=status)


class GuardMiddleware:
    """Runs `Guard.refusal` before any route (plain ASGI: nothing of the body is read)."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websockets here
            await send({"type": "websocket.close", "code": 1008})
            return
        refused = self.guard.refusal(Request(scope))
        if refused is not None:
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)
