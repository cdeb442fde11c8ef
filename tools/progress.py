"""Progress reporting for long waits. Tools report; the CLI decides how it is shown (a rich status
line on a terminal, else `PlainLines`: timestamped lines in a log), and while a session runs the
latest line is also kept in its folder (`progress.json`) for the approval page of `perfloop
serve`, which runs in another process."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

FILE = "progress.json"

_reporter: Callable[[str], None] = lambda message: None
_sink: Path | None = None
_local = threading.local()  # each thread's own `within` prefixes (parallel trials, a reference host)


def _where() -> list[str]:
    if not hasattr(_local, "where"):
        _local.where = []
    where: list[str] = _local.where
    return where


def set_reporter(reporter: Callable[[str], None]) -> None:
    """Install the function that shows progress lines (the CLI installs a rich status)."""
    global _reporter
    _reporter = reporter


def keep_in(folder: Path | None) -> None:
    """Keep the latest line in `folder`/progress.json from now on (None: stop, and remove it)."""
    global _sink
    if folder is None and _sink is not None:
        _sink.unlink(missing_ok=True)
    _sink = None if folder is None else folder / FILE


@contextmanager
def within(what: str) -> Iterator[None]:
    """Prefix the lines reported meanwhile with `what` (e.g. `look 2/3`): where in a step they are."""
    where = _where()
    where.append(what)
    try:
        yield
    finally:
        where.pop()


def report(message: str) -> None:
    """Show one progress line, e.g. `waiting for health: 12.3s; log: loading weights`. A line may
    quote a child process (a server's log, a host's progress): it goes out through
    `tools.secrets.outside`, secrets masked and hidden characters escaped, wherever it is shown."""
    from tools.secrets import outside  # here, not at the top: an SSH host's bare Python imports this module

    message = outside(": ".join([*_where(), message]))
    _reporter(message)
    if _sink is not None:
        try:
            _sink.parent.mkdir(parents=True, exist_ok=True)
            tmp = _sink.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"message": message, "at": time.time()}))
            tmp.replace(_sink)
        except OSError:
            pass  # progress is a courtesy: a full disk must not stop the session


def read_latest(folder: Path) -> dict | None:
    """The latest line kept in `folder` by a running session (`message`, `at`), if any."""
    try:
        value = json.loads((folder / FILE).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class PlainLines:
    """Progress for a log (stderr not a terminal: nohup, CI, a tee): one timestamped line per
    report, at most one every `gap_s`; a report held back by the gap is written when it ends, and
    while nothing new comes the latest is written again every `quiet_s` (`... (still, 30 s on it)`), so a log
    never stays silent longer than that while something runs. Use as a context manager."""

    def __init__(self, write: Callable[[str], None], gap_s: float = 3.0, quiet_s: float = 6.0) -> None:
        self.write, self.gap_s, self.quiet_s = write, gap_s, quiet_s
        self.latest: str | None = None
        self.shown: str | None = None
        self.at = 0.0
        self.since = 0.0
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="perfloop-progress", daemon=True)

    def __enter__(self) -> PlainLines:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=2)

    def __call__(self, message: str) -> None:
        with self.lock:
            if message != self.latest:
                self.since = time.monotonic()
            self.latest = message
            if time.monotonic() - self.at >= self.gap_s:
                self._emit(message)

    def _emit(self, message: str, still: bool = False) -> None:
        self.at, self.shown = time.monotonic(), message
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        on = f" (still, {time.monotonic() - self.since:.0f} s on it)" if still else ""
        self.write(f"{stamp} perfloop: {message}{on}")

    def _watch(self) -> None:
        while not self.done.wait(min(0.5, self.gap_s / 4)):
            with self.lock:
                if self.latest is None:
                    continue
                waited = time.monotonic() - self.at
                if self.latest != self.shown and waited >= self.gap_s:
                    self._emit(self.latest)
                elif waited >= self.quiet_s:
                    self._emit(self.latest, still=True)
