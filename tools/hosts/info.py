"""What perfloop asks a host about itself."""

from __future__ import annotations

import time

from state.calls import ClockArgs, ClockResult, PathArgs
from tools.door.registry import tool


@tool("host.expand_user")
def expand_user(args: PathArgs) -> PathArgs:
    """The path with `~` expanded on the host where it runs (its user's home)."""
    return PathArgs(path=args.path.expanduser())


@tool("host.clock", where="local")
def clock(args: ClockArgs) -> ClockResult:
    """The time here, through the door so that a replay reads the recorded time (the search's
    budget in minutes is judged on it)."""
    return ClockResult(epoch_s=time.time())
