"""What never goes to a model endpoint: secret-looking files, and secrets inside text (pure).

`secret_file` names files the read-only tools refuse whatever their content (`.env`, keys,
certificates, credentials); `redact` masks, in any text sent to the model, the values perfloop
knows to be secret and strings shaped like keys, tokens and passwords (`tools.secrets`), and
secrets assigned in code or environment files;
`redact_argv` masks the values of secret-looking options of a launch command (`--api-key X`,
`--hf-token=X`).
"""

from __future__ import annotations

import fnmatch
import re

from tools import secrets

MASK = "***"
SECRET_FILES = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.kdbx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    ".htpasswd",
    "credentials*",
    "secrets.json",
    "secrets.y*ml",
    "secrets.toml",
    "*.secret",
    "*.secrets",
    "*.tfstate",
)
"""File-name patterns (case-insensitive) the tools never read, list or search."""

_ASSIGNED = re.compile(
    r"(?i)(\b[\w-]*(?:api[_-]?key|secret|token|password|passwd)[\w-]*[\"']?\s*[:=]\s*)([\"'])([^\"'\s]{8,})\2"
)
"""A secret-named key or variable assigned a quoted literal (`api_key = "..."`, `"token": "..."`)."""
_ENV_LINE = re.compile(
    r"(?m)^(\s*(?:export\s+)?[A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Z0-9_]*=)\S+"
)
"""An environment-file line `NAME_KEY=value`."""
_OPTION = re.compile(
    r"(?i)^--?(?:[a-z0-9]+[-_])*(?:api[-_]?key|key|token|secret|password|passwd)(?:[-_][a-z0-9]+)*$"
)
"""A command-line option whose value is a secret (`--api-key`, `--hf-token`), not `--max-tokens`."""


def secret_file(name: str) -> bool:
    """Whether a file name looks like it holds secrets (pure)."""
    low = name.lower()
    return any(fnmatch.fnmatch(low, p) for p in SECRET_FILES)


def redact(text: str) -> str:
    """`text` with known secret values, key-shaped strings and assigned secrets masked."""
    text = secrets.mask_shapes(secrets.redact(text))
    text = _ASSIGNED.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}{m.group(2)}", text)
    return _ENV_LINE.sub(lambda m: m.group(1) + MASK, text)


def is_secret_option(flag: str) -> bool:
    """Whether a command-line option's value is masked as a secret (`--api-key`, `--hf-token`) (pure)."""
    return _OPTION.match(flag) is not None


def redact_argv(argv: list[str]) -> list[str]:
    """The launch command with the values of secret-looking options masked (pure but for the
    known secret values)."""
    out: list[str] = []
    for k, arg in enumerate(argv):
        name, eq, _ = arg.partition("=")
        if eq and _OPTION.match(name):
            out.append(f"{name}={MASK}")
        elif k > 0 and _OPTION.match(argv[k - 1]) and "=" not in argv[k - 1] and not arg.startswith("-"):
            out.append(MASK)
        else:
            out.append(redact(arg))
    return out
