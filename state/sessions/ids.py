"""Identifiers that come from outside (command lines, exports, recordings): one strict pattern each."""

import re
from typing import Annotated, Literal

from pydantic import AfterValidator

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""A session id: letters, digits, `-` and `_`, starting with a letter or digit, at most 64 characters
(e.g. `20261129-101500-a1b2`). It names files and folders under $PERFLOOP_HOME, so nothing path-like
(`/`, `.`, `..`) can pass."""

SESSION_ID_RULE = "letters, digits, - and _, starting with a letter or digit, at most 64 characters"


def session_id_problem(value: object) -> str | None:
    """Why `value` is not a session id, or None if it is one (pure)."""
    if not isinstance(value, str):
        return f"{type(value).__name__} is not a session id (a string of {SESSION_ID_RULE})"
    if not SESSION_ID.fullmatch(value):
        return f"{value[:80]!r} is not a session id ({SESSION_ID_RULE})"
    return None


def _checked(value: str) -> str:
    problem = session_id_problem(value)
    if problem:
        raise ValueError(problem)
    return value


SessionId = Annotated[str, AfterValidator(_checked)]
"""A str field that holds a session id."""


ForkStep = Literal["profile", "diagnose", "propose", "approve"]
"""Steps a session can be forked at: decision points before the tree changes in an iteration."""
