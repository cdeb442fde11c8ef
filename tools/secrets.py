"""Keeping secrets out of everything perfloop writes.

Secrets never enter the session state: a target names the environment variables to pass to its
server (`launch.pass_env`), and their values are read from perfloop's own environment at launch.
As a second line of defence, `redact()` masks the value of every secret-looking environment
variable (and every value registered with `register()`) in text before it is stored or shown.
"""

from __future__ import annotations

import os

from state.target import SECRET_NAME

MASK = "***"
_MIN_LEN = 6
_registered: set[str] = set()


def looks_secret(name: str) -> bool:
    """Whether an environment variable or field name suggests a secret (pure)."""
    return bool(SECRET_NAME.search(name))


def register(value: str) -> None:
    """Mask `value` from now on (e.g. an SSH passphrase typed at a prompt)."""
    if len(value) >= _MIN_LEN:
        _registered.add(value)


def _secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if looks_secret(k) and len(v) >= _MIN_LEN}
    return sorted(values | _registered, key=len, reverse=True)


def redact(text: str) -> str:
    """`text` with every known secret value replaced by ***."""
    for value in _secrets():
        text = text.replace(value, MASK)
    return text
