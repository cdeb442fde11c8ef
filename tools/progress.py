"""Progress reporting for long waits. Tools report; the CLI decides how it is shown (rich)."""

from __future__ import annotations

from collections.abc import Callable

_reporter: Callable[[str], None] = lambda message: None


def set_reporter(reporter: Callable[[str], None]) -> None:
    """Install the function that shows progress lines (the CLI installs a rich status)."""
    global _reporter
    _reporter = reporter


def report(message: str) -> None:
    """Show one progress line, e.g. `waiting for health: 12.3s; log: loading weights`."""
    _reporter(message)
