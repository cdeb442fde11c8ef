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
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from agent.cli import terminal

PIPE_CLOSED = 141
"""The exit status when stdout's reader went away (128 + SIGPIPE, as `seq 1e6 | head -1` gives)."""


class PipeConsole(terminal.Pausing):
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


WORD_CAP = 30
"""A wrapped column is never narrower than its longest word up to this many characters (a name
like `kv-cache-full-pool-cast` stays whole); longer words (a C++ kernel's name) fold."""
GAP = 2
"""Spaces between two columns."""


class Tabular:
    """A table laid out at render time for the console's width, as `git`, `kubectl` and `gh` print:

    - the `keep` first columns (the ids: a session, a task) and the `whole` ones (dates, intervals)
      never wrap nor fold; other columns wrap between words, never narrower than their longest
      word (up to `WORD_CAP`), so a name is not folded mid-word;
    - a `below` column (a reason, a list) that does not fit on the row's line goes below the table,
      one paragraph per row led by the row's ids (`ID HEADER: text`), wrapped between words;
    - not a terminal (piped, a log): no colour, no lines, no trailing spaces; the width is $COLUMNS,
      else 80 (agent/cli/terminal.py), so every line fits 80 columns unless one id alone is wider.
    """

    def __init__(
        self,
        header: Sequence[str],
        rows: Sequence[Sequence[str]],
        keep: int = 1,
        whole: Sequence[int] = (),
        below: Sequence[int] = (),
        title: str | None = None,
        show_header: bool = True,
        lead: int = 1,
    ) -> None:
        self.header, self.rows, self.title, self.show_header = (
            list(header),
            [list(r) for r in rows],
            title,
            show_header,
        )
        self.keep, self.fixed = keep, set(range(keep)) | set(whole)
        self.below, self.lead = list(below), lead

    def _natural(self, i: int) -> int:
        cells = [c for r in self.rows for c in r[i].splitlines()] + (
            [self.header[i]] if self.show_header else []
        )
        return max([1, *map(len, cells)])

    def _least(self, i: int) -> int:
        if i in self.fixed:
            return self._natural(i)
        words = [w for r in self.rows for w in r[i].split()] + (
            self.header[i].split() if self.show_header else []
        )
        return max([1, *(min(len(w), WORD_CAP) for w in words)])

    def layout(self, width: int) -> tuple[list[int], list[int]]:
        """The columns shown in the table with their widths, and those moved below (pure)."""
        shown = list(range(len(self.header)))
        moved: list[int] = []
        natural = {i: self._natural(i) for i in shown}

        def total(cols: list[int], widths: dict[int, int]) -> int:
            return sum(widths[i] for i in cols) + GAP * (len(cols) - 1)

        for i in self.below:  # a long column goes below before any other column wraps
            if total(shown, natural) <= width:
                break
            shown.remove(i)
            moved.append(i)
        least = {i: self._least(i) for i in shown}
        rest = [i for i in reversed(shown) if i >= self.keep]  # too narrow even wrapped: more go below
        while rest and total(shown, least) > width:
            shown.remove(rest[0])
            moved.append(rest.pop(0))
        widths = dict(natural)
        excess = total(shown, widths) - width
        while excess > 0:  # narrow the widest wrappable column, down to its longest word
            free = [i for i in shown if i not in self.fixed and widths[i] > least[i]]
            if not free:
                break
            widest = max(free, key=lambda i: widths[i] - least[i])
            cut = min(excess, widths[widest] - least[widest], max(1, (widths[widest] - least[widest]) // 2))
            widths[widest] -= cut
            excess -= cut
        return [widths[i] for i in shown], moved

    def _table(self, widths: list[int], shown: list[int], plain: bool) -> Table:
        t = Table(
            box=None,
            pad_edge=False,
            padding=(0, GAP, 0, 0),
            show_header=self.show_header,
            header_style="" if plain else "bold",
            title=None,
        )
        for w, i in zip(widths, shown, strict=True):
            t.add_column(self.header[i], width=w, no_wrap=i in self.fixed, overflow="fold")
        for r in self.rows:
            t.add_row(*(Text(r[i]) for i in shown))
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        plain = not console.is_terminal
        shown_widths, moved = self.layout(width)
        shown = [i for i in range(len(self.header)) if i not in moved]
        parts: list[Text | Table] = []
        if self.title:
            parts.append(Text(self.title, style="" if plain else "bold"))
        parts.append(self._table(shown_widths, shown, plain))
        keys = list(range(min(self.lead, self.keep))) or [shown[0]]  # leads a row's paragraph below
        for r in self.rows:
            for i in moved:
                if r[i].strip() and r[i] != "-":
                    para = Text(f"{' '.join(r[k] for k in keys)} {self.header[i]}: {r[i]}")
                    for n, wrapped in enumerate(para.wrap(console, width - 4)):
                        parts.append(Text("    ") + wrapped if n else wrapped)
        wide = options.update(height=None, width=max(width, sum(shown_widths) + GAP * (len(shown) - 1)))
        for part in parts:
            for segments in console.render_lines(part, wide, pad=False, new_lines=False):
                if plain:
                    yield Segment("".join(seg.text for seg in segments if not seg.control).rstrip())
                else:
                    yield from segments
                yield Segment.line()


def table(
    *header: str,
    rows: Sequence[tuple[str, ...]],
    keep: int = 1,
    whole: Sequence[int] = (),
    below: Sequence[int] = (),
    title: str | None = None,
    show_header: bool = True,
    lead: int = 1,
) -> Tabular:
    """A table that never cuts an id nor folds a name, at the console's width (`Tabular`)."""
    return Tabular(header, rows, keep, whole, below, title, show_header, lead)


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


def shell_lines(command: str, width: int, indent: str) -> str:
    """A shell command broken between its words with ` \\` continuations so that no line is wider
    than `width` (a word wider stays whole on its own line); pasted, it runs as written (pure)."""
    try:
        words = shlex.split(command)
    except ValueError:  # not one shell command: as it is
        return indent + command
    lines, line = [], indent
    for word in map(shlex.quote, words):
        if line.strip() and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = indent + "  " + word
        else:
            line = f"{line} {word}" if line.strip() else line + word
    return "\n".join([*lines, line])
