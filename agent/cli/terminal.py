"""The consoles every command prints through: what reaches the terminal shows hidden characters as
escapes, and no text is read as Rich markup.

Stored text (diffs, titles, rationales, names, reasons, commands: whatever came from the store, a
model or a target file) may hold terminal control sequences or bidi controls that would make the
screen show another line than the one stored. `console()` makes a Rich console whose every printed
renderable goes through `tools.workspace.hidden.visible` on its way out (a render hook, so no renderer can
forget it), and which reads no markup or emoji codes in strings: styles are given as `Text` styles
(`styled`), never as `[bold]` markup around a stored string.

Piped (not a terminal: `| less`, `| grep`, a CI log), a console is $COLUMNS wide, else 80 (what
git, kubectl and gh assume): tables (agent/cli/output.py `table`) lay out for it, lines wrap between
words, and what must stay whole to be copied (a command, a diff) is printed with `soft_wrap`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.segment import Segment
from rich.text import Text

from tools.workspace.hidden import visible

if TYPE_CHECKING:
    from rich.status import Status


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


LIVE: list[Status] = []
"""The terminal's status line (spinner) of the running command, while it runs (agent/cli/running.py)."""


class Pausing(Console):
    """A console that takes the spinner off the terminal while it prints: the status line belongs to
    the stderr console, and a line printed through another console (stdout's) would otherwise land
    behind the spinner's text (`⠸ perfloopcalibrate: ...`) and leave a frame above a table."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        live = [s for s in LIVE if s.console is not self and s.console.is_terminal and s._live.is_started]
        for status in live:
            status.stop()  # transient: its line is cleared
        try:
            super().print(*objects, **kwargs)
        finally:
            for status in live:
                status.start()


def console(*, stderr: bool = False, cls: type[Console] = Pausing) -> Console:
    """A console for a command's output (stderr: its errors and progress line); `cls` a Console
    subclass (agent/cli/output.py's, which ends quietly on a closed pipe)."""
    out = cls(stderr=stderr, markup=False, emoji=False)  # width: the terminal's, else $COLUMNS, else 80
    out.push_render_hook(_ShowHidden())
    return out


def styled(*parts: str | tuple[str, str]) -> Text:
    """One line of plain strings and (string, style) pairs, no markup read (`Text.assemble`); its
    text shown with hidden characters as escapes."""
    return Text.assemble(*((visible(p), "") if isinstance(p, str) else (visible(p[0]), p[1]) for p in parts))


def perfloop() -> str:
    """How a user runs this perfloop again, for a line printed to be copied (`next: ...`):
    `perfloop` when that name on $PATH is this very program, else the path of the running
    executable (`.venv/bin/perfloop` under the current directory, else absolute), or
    `PYTHON -m agent.cli` when started so (shell-quoted; a test's runner gets `perfloop`)."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "__main__.py" and argv0.parent.name == "cli":
        return f"{shlex.quote(_short(Path(sys.executable)))} -m agent.cli"
    if argv0 is None or argv0.name != "perfloop":
        return "perfloop"
    running = shutil.which(str(argv0)) or str(argv0)
    on_path = shutil.which("perfloop")
    if on_path is not None and os.path.realpath(on_path) == os.path.realpath(running):
        return "perfloop"
    return shlex.quote(_short(Path(running)))


def _short(path: Path) -> str:
    """`path` relative to the current directory when under it (`.venv/bin/perfloop`), else absolute."""
    path = Path(os.path.abspath(path))
    try:
        rel = path.relative_to(Path.cwd())
    except ValueError:
        return str(path)
    return str(rel) if str(rel).startswith(".") or "/" in str(rel) else f"./{rel}"
