"""Where a command's output goes: with `--json`, one JSON document on stdout and nothing else (the
tables and lines a person reads go to stderr); without it, tables on stdout.

A closed pipe (`perfloop sessions --json | head -1`) is not an error: `quiet_pipe` ends the
command silently with status 141 (128 + SIGPIPE), what a Unix tool killed by SIGPIPE exits with.
SIGPIPE itself stays ignored (Python's default): perfloop writes to servers' sockets, and a server
dying mid-request must be an error it handles, not a signal that kills the loop.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.cli import terminal

PIPE_CLOSED = 141
"""The exit status when stdout's reader went away (128 + SIGPIPE, as `seq 1e6 | head -1` gives)."""


class PipeConsole(Console):
    """A console whose closed pipe ends the command as `quiet_pipe` says (rich's own exits 1)."""

    def on_broken_pipe(self) -> None:
        raise SystemExit(quiet_pipe())


def console(as_json: bool = False) -> Console:
    """The console for what a person reads: stdout, or stderr when stdout carries `--json`'s
    document; hidden characters shown as escapes, no markup read (agent/cli/terminal.py)."""
    return terminal.console(stderr=as_json, cls=PipeConsole)


def emit(doc: Any) -> None:
    """Print `--json`'s one document on stdout, flushed (so that a closed pipe is met here)."""
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def quiet_pipe() -> int:
    """After a BrokenPipeError on stdout: point stdout at /dev/null (so that the interpreter's last
    flush does not fail again) and return the exit status to end with."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no file descriptor (a test's capture)
        pass
    finally:
        os.close(devnull)
    return PIPE_CLOSED


WORD = 5
"""A column other than the ids is at least this wide (or its header's longest word, if shorter)."""


def table(*header: str, rows: Sequence[tuple[str, ...]], keep: int = 1, title: str | None = None) -> Table:
    """A table that never cuts an id: the first `keep` columns (the ids: a session, a task) are
    never wrapped nor shortened; the others wrap (fold) to fit, at 80 columns or piped too."""
    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for n, name in enumerate(header):
        if n < keep:
            width = max([len(name), *(len(r[n]) for r in rows)])
            t.add_column(name, no_wrap=True, min_width=width)
        else:
            t.add_column(name, overflow="fold", min_width=min(WORD, max(len(w) for w in name.split())))
    for r in rows:
        t.add_row(*r)
    return t


def diff_text(diff: str) -> Text:
    """A unified diff coloured line by line and otherwise as it is: no padding to the terminal's
    width, no markup read in it (print it with `soft_wrap=True`, so long lines are not folded and
    a copy of it still applies)."""
    out = Text()
    for line in diff.splitlines(keepends=True):
        style = (
            "bold"
            if line.startswith(("+++", "---", "diff ", "index "))
            else "cyan"
            if line.startswith("@@")
            else "green"
            if line.startswith("+")
            else "red"
            if line.startswith("-")
            else ""
        )
        out.append(line, style=style)
    return out
