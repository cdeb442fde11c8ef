"""SIGINT, SIGTERM and SIGHUP while a session runs: `Interrupted` is raised in the main thread, so
the session can stop what it started before perfloop exits (`agent/sessions/interrupts.py`).

`catching()` installs the handlers for a block (main thread only; elsewhere it does nothing).
The first signal raises `Interrupted` where the main thread is, unless it is inside a
`deferred()` block (e.g. between a server's spawn and the write of its pid file, so that no server
is ever started without a record that finds it): then it is raised when the block ends. Signals
after the first are only noted, so a second Ctrl-C cannot cut the clean-up short.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that interrupt a session."""


class Interrupted(BaseException):
    """A signal stopped the session (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.note = ""
        """What the session did about it (set by whoever cleaned up), for the one-line message."""
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""
        return 128 + self.signum


class _State:
    active = False
    armed = False
    deferred = 0
    pending: int | None = None


def _handler(signum: int, frame: FrameType | None) -> None:
    if _State.pending is None:
        _State.pending = signum
    if _State.armed and not _State.deferred:
        _State.armed = False  # later signals are only noted
        raise Interrupted(signum)


@contextmanager
def catching() -> Iterator[None]:
    """Turn the session-stopping signals into `Interrupted` for the block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in SIGNALS}
    _State.active, _State.armed, _State.deferred, _State.pending = True, True, 0, None
    for s in SIGNALS:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        _State.active, _State.armed, _State.pending = False, False, None
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def deferred() -> Iterator[None]:
    """A signal arriving in the block is raised when the block ends."""
    _State.deferred += 1
    try:
        yield
    finally:
        _State.deferred -= 1
        if not _State.deferred and _State.armed and _State.pending is not None:
            _State.armed = False
            raise Interrupted(_State.pending)


def stopping() -> int | None:
    """The signal that interrupted the session (None while none has): tools asked for after it,
    e.g. by a parallel trial's thread, are refused (`tools/door/live.py`)."""
    return _State.pending if _State.active and not _State.armed else None
