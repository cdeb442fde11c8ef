"""Keeping secrets out of everything perfloop writes.

Secrets never enter the session state: a target names the environment variables to pass to its
server (`launch.pass_env`), and their values are read from perfloop's own environment at launch
(and registered here, whatever their names). As a second line of defence, every value known at
write time (every secret-looking environment variable's, and every registered one) is masked in
what perfloop stores and prints: `redact()` for text (the session store, exports, error lines),
`redact_bytes()` for the checkpoints (same-length masks, so serialized lengths stay valid), and
`outside()` for a child process's text shown to a person (key shapes masked too). A later
`perfloop show` without the variables therefore has nothing to leak.

The server's environment follows one policy (`server_env`): perfloop's own environment minus every
secret-looking variable, every variable whose value holds a URL password (`DATABASE_URL`), and
`PERFLOOP_STORE`, unless named in `launch.pass_env`, plus `launch.env`,
plus the `pass_env` values.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote

from state.base import SECRET_NAME
from tools.workspace.hidden import visible

MASK = "***"
PERFLOOP_ONLY = frozenset({"PERFLOOP_STORE"})
"""perfloop's own variables that hold a secret under an innocent name (the store URL's password):
never passed to a server unless named in `pass_env`."""
_MIN_LEN = 6
_registered: set[str] = set()


def looks_secret(name: str) -> bool:
    """Whether an environment variable or field name suggests a secret (pure)."""
    return bool(SECRET_NAME.search(name))


def register(value: str) -> None:
    """Mask `value` from now on (e.g. an SSH passphrase typed at a prompt)."""
    if len(value) >= _MIN_LEN:
        _registered.add(value)


URL_PASSWORD = re.compile(r"://([^/@\s:]*):([^/@\s]*)@")
"""`scheme://user:password@host`: a variable whose value holds one (whatever its name, e.g.
`DATABASE_URL`) is dropped from every child's environment, as the probe drops it
(tools/llm/probe.py), and its password is a known secret."""


def _secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if looks_secret(k) and len(v) >= _MIN_LEN}
    passwords = {m[2] for v in os.environ.values() for m in URL_PASSWORD.finditer(v) if len(m[2]) >= _MIN_LEN}
    return sorted(values | passwords | _registered, key=len, reverse=True)


def _forms(value: str) -> list[str]:
    """A value as it may appear in stored or printed text (issue 56: by shape, not only verbatim):
    raw, escaped inside a JSON string, URL-encoded (`%2F`, `+` for a space, either case of hex),
    percent-decoded (a password taken from a URL), and base64 (standard and URL-safe, unpadded).
    Each is matched whatever its letter case (`_pattern`)."""
    forms: list[str] = []
    for v in dict.fromkeys([value, unquote(value)]):
        forms += [v, json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1]]
        forms += [quote(v, safe=""), quote_plus(v, safe=""), *_b64(v)]
    return [f for f in dict.fromkeys(forms) if len(f) >= _MIN_LEN]


def _b64(value: str) -> list[str]:
    raw = value.encode("utf-8", "surrogatepass")
    return [base64.b64encode(raw).decode().rstrip("="), base64.urlsafe_b64encode(raw).decode().rstrip("=")]


def _pattern(value: str) -> re.Pattern[str]:
    """Every form of `value`, letter case ignored but for base64's (which case changes)."""
    b64 = {f for v in (value, unquote(value)) for f in _b64(v)}
    loose = [re.escape(f) for f in _forms(value) if f not in b64]
    exact = [re.escape(f) for f in b64 if len(f) >= _MIN_LEN]
    alts = [f"(?i:{f})" for f in loose] + exact
    return re.compile("|".join(sorted(alts, key=len, reverse=True)))


def redact(text: str) -> str:
    """`text` with every known secret value, in every form (`_forms`), replaced by ***."""
    for value in _secrets():
        text = _pattern(value).sub(MASK, text)
    return text


def redact_bytes(data: bytes) -> bytes:
    """Serialized `data` with every known secret value's bytes, in every form, replaced by as many
    `*` (lengths unchanged, so msgpack and JSON framing stay valid)."""
    for value in _secrets():
        shape = re.compile(_pattern(value).pattern.encode("utf-8", "surrogatepass"))
        data = shape.sub(lambda m: b"*" * len(m[0]), data)
    return data


KEY_SHAPES = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S), MASK),
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"), MASK),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\g<1>{MASK}"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@]+:)(?!PASSWORD@)[^\s/@]+@"), rf"\g<1>{MASK}@"),
)
"""Strings shaped like keys, whoever's (pattern, replacement): private keys, `sk-...`, GitHub,
Hugging Face, Slack and AWS keys, a `Bearer` token, the password in `scheme://user:password@host`
(but the placeholder `PASSWORD` of a message that shows the form)."""


def mask_shapes(text: str) -> str:
    """`text` with every key-shaped string (KEY_SHAPES) masked (pure)."""
    for shape, mask in KEY_SHAPES:
        text = shape.sub(mask, text)
    return text


def outside(text: str) -> str:
    """Text from outside perfloop (a server's log, a benchmark client's output, a model's reply)
    as it may be shown or written for a person: known secret values (`redact`) and key-shaped
    strings masked, hidden characters (escape sequences, CR, bidi controls) shown as escapes. The
    one function every line carrying a child process's text goes through."""
    return visible(mask_shapes(redact(text)))


def scrub_file(path: Path) -> None:
    """Mask known secret values in a file in place (e.g. a server log once the server is gone)."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    clean = redact_bytes(data)
    if clean != data:
        path.write_bytes(clean)


def server_env(environ: Mapping[str, str], extra: Mapping[str, str], pass_env: list[str]) -> dict[str, str]:
    """The server's whole environment (pure): `environ` minus secret-looking variables not named in
    `pass_env`, then `extra` (launch.env) and the named variables' values."""
    named = set(pass_env)
    env = {
        k: v
        for k, v in environ.items()
        if k in named or not (looks_secret(k) or k in PERFLOOP_ONLY or URL_PASSWORD.search(v))
    }
    return {**env, **extra, **{k: environ[k] for k in pass_env if k in environ}}


def child_env(environ: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a child that is not the server (benchmark clients, probes): the server's
    policy with no variable passed on, so no secret (pure)."""
    return server_env(environ, extra, [])


def kept_log(prefix: str, text: str) -> Path:
    """A failed child's output kept for the user: secrets masked, mode 0600, in $PERFLOOP_HOME/logs
    (the user's 0700 folder on the host that ran it, not the system temp folder)."""
    folder = Path(os.environ.get("PERFLOOP_HOME") or Path.home() / ".perfloop").expanduser() / "logs"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{prefix}-{os.getpid()}-{os.urandom(3).hex()}.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(redact(text))
    return path
