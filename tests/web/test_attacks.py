"""`perfloop serve` probed over raw HTTP as an attacker would, on its default loopback bind (one real
server for the module, on the shipped demo recording): a foreign `Host` (DNS rebinding) and a
request without the token are refused on every route; every response, refusals included, carries
the CSP with `frame-ancestors`, `nosniff` and `no-store` and echoes nothing; a body over the limit
is refused before it is sent; a half-sent request is dropped; and (Hypothesis) no header, path or
form field gets a 5xx."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.web.hardening import REQUEST_S
from tests.e2e.conftest import PERFLOOP
from tests.web.conftest import Served

TOKEN = "a-test-token-of-32-characters-xx"
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class Reply:
    def __init__(self, data: bytes) -> None:
        head, _, self.body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else 0
        self.headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}


def send(port: int, data: bytes, timeout: float = 30) -> Reply:
    """Send raw bytes, read the reply until the server closes (every request says Connection: close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return Reply(got)


def request(
    served: Served,
    target: str | bytes,
    method: str = "GET",
    headers: list[tuple[bytes, bytes]] | None = None,
    body: bytes = b"",
    host: bytes | None = None,
    auth: bool = True,
) -> Reply:
    t = target.encode("latin-1") if isinstance(target, str) else target
    lines = [method.encode() + b" " + t + b" HTTP/1.1"]
    lines.append(b"Host: " + (host if host is not None else f"127.0.0.1:{served.port}".encode()))
    if auth:
        lines.append(b"Authorization: Bearer " + TOKEN.encode())
    lines += [k + b": " + v for k, v in headers or []]
    if body or method == "POST":
        lines.append(b"Content-Length: " + str(len(body)).encode())
    lines.append(b"Connection: close")
    return send(served.port, b"\r\n".join(lines) + b"\r\n\r\n" + body)


@pytest.fixture(scope="module")
def served(recorded_home: tuple[Path, str]) -> Iterator[Served]:
    home, _ = recorded_home
    s = Served(home, token=TOKEN)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def sid(recorded_home: tuple[Path, str]) -> str:
    return recorded_home[1]


def routes(sid: str) -> list[tuple[str, str]]:
    return [
        ("GET", "/"),
        ("GET", "/?page=2"),
        ("GET", "/api/sessions"),
        ("GET", f"/sessions/{sid}"),
        ("GET", f"/sessions/{sid}/report.html"),
        ("GET", f"/sessions/{sid}/files/web/nothing"),
        ("GET", f"/api/sessions/{sid}"),
        ("POST", f"/sessions/{sid}/approve"),
        ("GET", "/no/such/route"),
    ]


def assert_hardened(r: Reply) -> None:
    csp = r.headers.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, r.headers
    assert r.headers.get("x-content-type-options") == "nosniff"
    assert r.headers.get("cache-control") == "no-store"
    assert r.headers.get("referrer-policy") == "no-referrer"
    assert r.headers.get("content-type"), r.headers


def test_the_printed_address_has_no_token_when_it_came_from_the_environment(served: Served) -> None:
    assert served.url.startswith("http://127.0.0.1:")  # the default, loopback bind
    assert served.token == TOKEN


def test_a_foreign_host_is_refused_on_every_route(served: Served, sid: str) -> None:
    for method, path in routes(sid):
        for host in (b"rebind.test:%d" % served.port, b"127.0.0.1.nip.io:%d" % served.port, b"localhost"):
            r = request(served, path, method, host=host)
            assert r.status == 403, (method, path, host, r.status)
            assert b"rebind" not in r.body and b"nip.io" not in r.body  # echoes nothing
            assert_hardened(r)
    for host in (b"localhost", b"127.0.0.1", b"[::1]"):  # the server's own names, with its port
        assert request(served, "/", host=host + b":%d" % served.port).status == 200


def test_a_loopback_server_refuses_every_route_without_its_token(served: Served, sid: str) -> None:
    for method, path in routes(sid):
        r = request(served, path, method, auth=False)
        assert r.status == 401, (method, path, r.status)
        assert_hardened(r)
        wrong = request(served, path, method, auth=False, headers=[(b"Authorization", b"Bearer nope")])
        assert wrong.status == 401
    for bad in (b"Bearer \xc3\xa9\xc3\xa9", b"Bearer " + b"x" * 5000, b"\xff\xfe"):  # bytes, any length
        assert request(served, "/", auth=False, headers=[(b"Authorization", bad)]).status == 401
    assert request(served, "/?token=" + quote("é" * 40), auth=False).status == 401


def test_pages_and_errors_are_hardened_and_errors_echo_nothing(served: Served, sid: str) -> None:
    page = request(served, f"/sessions/{sid}")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert_hardened(page)
    nonce = page.headers["content-security-policy"].split("'nonce-")[1].split("'")[0]
    assert f'<script nonce="{nonce}">'.encode() in page.body  # the page's one script runs
    assert "form-action 'self'" in page.headers["content-security-policy"]
    for target in ("/sessions/nope-marker1", "/api/sessions/nope-marker1", "/sessions/<marker1>"):
        r = request(served, target)
        assert r.status == 404 and b"marker1" not in r.body, r.body
        assert r.headers["content-type"].startswith("text/plain")
        assert_hardened(r)
    garbage = send(served.port, b"GARBAGE \x00\xff\r\n\r\n")  # not HTTP: uvicorn's own 400
    assert garbage.status == 400
    assert_hardened(garbage)
    files = request(served, f"/sessions/{sid}/files/{'a' * 5000}")
    assert files.status == 404 and files.headers["content-type"].startswith("text/plain")
    for nasty in ("%00", "a%00b", "..%2f..%2fsessions.sqlite", "%2fetc%2fpasswd", "%c0%af"):
        assert request(served, f"/sessions/{sid}/files/{nasty}").status == 404, nasty


def test_the_list_is_paged_and_polled_as_json(served: Served, sid: str) -> None:
    index = request(served, "/")
    assert index.status == 200 and f'href="/sessions/{sid}"'.encode() in index.body
    assert b'perfloop.get("/api/sessions?page=1")' in index.body
    polled = request(served, "/api/sessions?page=7")
    assert polled.headers["content-type"] == "application/json"
    assert json.loads(polled.body)["page"] == 1 and json.loads(polled.body)["pages"] == 1


def test_no_cookie_is_set_and_a_page_without_the_token_is_the_empty_sign_in_shell(
    served: Served, sid: str
) -> None:
    """The token is never traded for a cookie (cookies reach every port of the host), neither from
    the address nor from the header; a page asked for without it is the sign-in shell: 401, its
    script under the CSP nonce, and nothing of the session."""
    for target in (f"/?token={TOKEN}", f"/sessions/{sid}?token={TOKEN}", f"//elsewhere.test/?token={TOKEN}"):
        r = request(served, target, auth=False)
        assert r.status == 401 and "set-cookie" not in r.headers and "location" not in r.headers, r.headers
        assert (
            b'id="perfloop-shell"' in r.body and sid.encode() not in r.body and TOKEN.encode() not in r.body
        )
        nonce = r.headers["content-security-policy"].split("'nonce-")[1].split("'")[0]
        assert f'<script nonce="{nonce}">'.encode() in r.body
    assert "set-cookie" not in request(served, f"/sessions/{sid}").headers
    assert request(served, "/api/sessions", auth=False).headers["content-type"].startswith("text/plain")


def test_a_post_is_refused_on_cheap_checks_before_its_body_is_read(served: Served, sid: str) -> None:
    form = [(b"Content-Type", b"application/x-www-form-urlencoded")]
    for origin in (b"http://rebind.test", b"null", b"http://127.0.0.1:1"):
        r = request(served, f"/sessions/{sid}/approve", "POST", [*form, (b"Origin", origin)], b"number=0")
        assert r.status == 403, origin
    site = request(served, f"/sessions/{sid}/approve", "POST", [*form, (b"Sec-Fetch-Site", b"cross-site")])
    assert site.status == 403
    for fetch_site in (b"cross-site", b"same-site", b"none"):
        null = [*form, (b"Origin", b"null"), (b"Sec-Fetch-Site", fetch_site)]
        assert request(served, f"/sessions/{sid}/approve", "POST", null, b"number=0").status == 403
    # Our own form (no-referrer makes the browser send Origin: null): past the guard, to the CSRF.
    own = [*form, (b"Origin", b"null"), (b"Sec-Fetch-Site", b"same-origin")]
    r = request(served, f"/sessions/{sid}/approve", "POST", own, b"number=0&csrf=guess")
    assert r.status == 403 and b"CSRF" in r.body
    wrong = request(served, f"/sessions/{sid}/approve?csrf=nope", "POST", form, b"number=0")
    assert wrong.status == 403 and b"CSRF" in wrong.body

    # 200 MB declared and none of it sent: refused at once, before the body is read.
    head = (
        f"POST /sessions/{sid}/approve HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {200 << 20}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as s:
        s.sendall(head + b"csrf=x&" * 1000)
        t0 = time.monotonic()
        reply = Reply(s.recv(65536))
    assert reply.status == 413 and time.monotonic() - t0 < 5, reply.status
    chunked = head.replace(f"Content-Length: {200 << 20}".encode(), b"Transfer-Encoding: chunked")
    r = send(served.port, chunked + b"5\r\ncsrf=\r\n0\r\n\r\n")
    assert r.status == 411


def test_a_half_sent_request_is_dropped(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=REQUEST_S + 10) as s:
        s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nX-Slow: ".encode())
        t0 = time.monotonic()
        assert s.recv(100) == b""  # closed by the server
    assert REQUEST_S - 1 < time.monotonic() - t0 < REQUEST_S + 5


NAMES = [b"Host", b"Authorization", b"Cookie", b"Origin", b"Sec-Fetch-Site", b"Content-Type"]
NAMES += [b"X-CSRF-Token", b"Content-Length", b"Transfer-Encoding", b"Range", b"If-None-Match"]


@FUZZ
@given(
    headers=st.lists(st.tuples(st.sampled_from(NAMES), st.binary(max_size=300)), max_size=4),
    route=st.integers(0, 8),
)
def test_fuzzed_headers_never_get_a_5xx(served: Served, sid: str, headers, route) -> None:
    method, path = routes(sid)[route]
    r = request(served, path, method, headers=headers)
    assert 0 < r.status < 500, (path, headers, r.status)


@FUZZ
@given(
    prefix=st.sampled_from(["/sessions/", "/api/sessions/", "/sessions/{sid}/files/", "/sessions/{sid}/"]),
    tail=st.binary(max_size=600),
    raw=st.booleans(),
)
def test_fuzzed_paths_never_get_a_5xx(served: Served, sid: str, prefix, tail, raw) -> None:
    path = prefix.format(sid=sid).encode() + (tail if raw else quote(tail, safe="/").encode())
    r = request(served, path)
    assert 0 < r.status < 500, (path, r.status)


@FUZZ
@given(
    fields=st.lists(
        st.tuples(
            st.sampled_from(["csrf", "number", "reason", "patch", "only", "x"]) | st.text(max_size=20),
            st.text(max_size=200),
        ),
        max_size=8,
    ),
    action=st.sampled_from(["approve", "reject", "edit", "nope", "%00"]),
    csrf_in_query=st.booleans(),
)
def test_fuzzed_forms_never_get_a_5xx(served: Served, sid: str, fields, action, csrf_in_query) -> None:
    csrf = "" if not csrf_in_query else "?csrf=" + quote("wrong-é")
    body = urlencode(fields).encode()
    form = [(b"Content-Type", b"application/x-www-form-urlencoded")]
    r = request(served, f"/sessions/{sid}/{action}{csrf}", "POST", form, body)
    assert 0 < r.status < 500, (fields, r.status)


def test_a_short_token_is_a_one_line_error(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(PERFLOOP), "serve", "--port", "0", "--token-file", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        env={**os.environ, "PERFLOOP_HOME": str(tmp_path), "PERFLOOP_SERVE_TOKEN": ""},
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--token-file" in out.stderr
    (tmp_path / "tok").write_text("short\n")
    out = subprocess.run(
        [str(PERFLOOP), "serve", "--port", "0", "--token-file", str(tmp_path / "tok")],
        capture_output=True,
        text=True,
        env={**os.environ, "PERFLOOP_HOME": str(tmp_path), "PERFLOOP_SERVE_TOKEN": ""},
    )
    assert out.returncode == 2 and "16 to 1024 printable characters" in out.stderr, out.stderr
