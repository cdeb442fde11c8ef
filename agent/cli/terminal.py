"""The consoles every command prints through: what reaches the terminal shows hidden characters as
escapes, and no text is read as Rich markup.

Stored text (diffs, titles, rationales, names, reasons, commands: whatever came from the store, a
model or a target file) may hold terminal control sequences or bidi controls that would make the
screen show another line than the one stored. `console()` makes a Rich console whose every printed
renderable goes through `tools.workspace.hidden.visible` on its way out (a render hook, so no renderer can
forget it), and which reads no markup or emoji codes in strings: styles are given as `Text` styles
(`styled`), never as `[bold]` markup around a stored string.

Piped (not a terminal: `| less`, `| grep`, a CI log), there is no width to fit: a console is
`PIPED_WIDTH` wide unless $COLUMNS says otherwise, so a table's cells (`sessions`' dates) and the
lines a command prints are never cut into a word per line at Rich's default 80 columns.
"""

from __future__ import annotations

import os

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.segment import Segment
from rich.text import Text

from tools.workspace.hidden import visible

PIPED_WIDTH = 4096
"""Columns of a console whose stream is not a terminal (and $COLUMNS unset): wider than any line."""


class _Visible:
    """`inner` as it renders, its text with hidden characters shown (cursor moves Rich itself
    makes, control segments, pass as they are)."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for seg in console.render(self.inner, options):
            yield seg if seg.control else Segment(visible(seg.text), seg.style)


class _ShowHidden(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Visible(r) for r in renderables]


def console(*, stderr: bool = False, cls: type[Console] = Console) -> Console:
    """A console for a command's output (stderr: its errors and progress line); `cls` a Console
    subclass (agent/cli/output.py's, which ends quietly on a closed pipe)."""
    out = cls(stderr=stderr, markup=False, emoji=False)
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        out.width = PIPED_WIDTH
    out.push_render_hook(_ShowHidden())
    return out


def styled(*parts: str | tuple[str, str]) -> Text:
    """One line of plain strings and (string, style) pairs, no markup read (`Text.assemble`); its
    text shown with hidden characters as escapes."""
    return Text.assemble(*((visible(p), "") if isinstance(p, str) else (visible(p[0]), p[1]) for p in parts))
