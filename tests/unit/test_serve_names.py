"""The names and origins `perfloop serve` answers to (agent/web/auth.py: `allowed`), fixed from the
bind and `--origin`, never from a request."""

from __future__ import annotations

import pytest

from agent.web.auth import allowed
from tools.errors import ConfigError


def test_a_loopback_bind_answers_to_its_loopback_names_with_its_port_only() -> None:
    hosts, origins = allowed("127.0.0.1", 8765)
    assert hosts == {"127.0.0.1:8765", "localhost:8765", "[::1]:8765"}
    assert origins == {f"http://{h}" for h in hosts}


def test_origin_adds_a_tunnel_port_and_a_tls_proxy() -> None:
    hosts, origins = allowed("::1", 8765, ["http://localhost:9000", "https://Perfloop.Example.com/"])
    assert {"[::1]:8765", "localhost:9000", "perfloop.example.com"} <= hosts
    assert {"http://localhost:9000", "https://perfloop.example.com"} <= origins
    assert "http://perfloop.example.com" not in origins  # the scheme as given


@pytest.mark.parametrize("bad", ["localhost:9000", "ftp://x", "http://x/path", "http://"])
def test_a_bad_origin_is_a_one_line_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="--origin"):
        allowed("127.0.0.1", 8765, [bad])
