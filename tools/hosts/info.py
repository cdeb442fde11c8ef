"""What perfloop asks a host about itself."""

from __future__ import annotations

from state.calls import PathArgs
from tools.door.registry import tool


@tool("host.expand_user")
def expand_user(args: PathArgs) -> PathArgs:
    """The path with `~` expanded on the host where it runs (its user's home)."""
    return PathArgs(path=args.path.expanduser())
