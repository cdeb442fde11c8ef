"""Small HTTP helpers on the standard library (they must also run on hosts with only Python)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any


def get_status(url: str, timeout_s: float = 2.0) -> int | None:
    """HTTP status of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def post_json(url: str, body: dict[str, Any], timeout_s: float = 30.0) -> tuple[int, str]:
    """POST a JSON body; return (status, response text)."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
