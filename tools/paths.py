"""One validation of identifiers and paths that come from outside perfloop.

`session_id` checks a session id against the one pattern (`state.sessions.ids.SESSION_ID`) wherever one is
read: command-line arguments, exports, the session store. `inside` checks that a path perfloop is
about to write resolves (symlinks followed) inside one of the allowed roots: $PERFLOOP_HOME or the
target repository. A refusal is a `ConfigError` naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from state.sessions.ids import session_id_problem
from tools.errors import ConfigError


def session_id(value: object, field: str = "SESSION") -> str:
    """`value` if it is a session id; else ConfigError naming `field`."""
    problem = session_id_problem(value)
    if problem:
        raise ConfigError(f"{field}: {problem}")
    return value  # type: ignore[return-value]


def inside(path: Path, roots: Sequence[Path], field: str) -> Path:
    """`path` resolved (symlinks followed, `..` removed) if it lies inside one of `roots`; else
    ConfigError naming `field` and where it really points."""
    resolved = Path(path).expanduser().resolve()
    real_roots = [Path(r).expanduser().resolve() for r in roots]
    if any(resolved.is_relative_to(r) for r in real_roots):
        return resolved
    allowed = " or ".join(str(r) for r in real_roots)
    raise ConfigError(
        f"{field}: {path} resolves to {resolved}, outside {allowed}; perfloop writes only there"
    )
