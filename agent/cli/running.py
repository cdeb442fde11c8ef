"""Running a command body: bad input becomes one line and exit 2, a bug one line and exit 3.

Every error line printed goes through `tools.secrets.outside` (it may quote a server's log or a
benchmark client's output). Light on purpose (typer, rich, our errors and secrets only): `perfloop analyze | diagnose | diff`
import this and not `agent.cli.common`, so that reading a trace never loads the loop (LangGraph,
the session store).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.status import Status

from agent.cli.output import quiet_pipe
from agent.cli.terminal import LIVE, console, styled
from tools import progress
from tools.errors import ServerLost, StoreUnreachable, ToolError, one_line
from tools.interrupts import Interrupted
from tools.secrets import outside

if TYPE_CHECKING:
    from agent.sessions.reading.stored import StoredSessions

err = console(stderr=True)
T = TypeVar("T")


def choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` if it is one of `allowed`; else bad input naming the option (the one way choices are checked)."""
    if value not in allowed:
        raise ToolError(f"--{name} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one error line on stderr; the exit to raise."""
    err.print(styled(("error:", "red"), " " + outside(message)), highlight=False, soft_wrap=True)
    return typer.Exit(code)


def plain_progress() -> bool:
    """Whether progress goes to stderr as timestamped lines (stderr not a terminal: nohup, CI, a
    tee'd log), unless PERFLOOP_PROGRESS=off; on a terminal it is a status line that updates."""
    return not err.is_terminal and os.environ.get("PERFLOOP_PROGRESS", "plain") != "off"


_STATUS: list[Status] = LIVE
"""The terminal's status line of the running command, if any (a console pauses it to print)."""


def status_line(on: bool) -> None:
    """Stop the terminal's status line (its spinner) before a result is printed or a question asked,
    so that no frame is left before them; start it again when the work goes on."""
    for status in _STATUS:
        status.start() if on else status.stop()


def run_command(body: Callable[[], T]) -> T:
    """Run a command body with its progress shown; errors become one line and an exit code."""
    try:
        if plain_progress():
            with progress.PlainLines(lambda line: print(line, file=sys.stderr, flush=True)) as lines:
                progress.set_reporter(lines)
                return body()
        with err.status("perfloop") as status:
            progress.set_reporter(lambda msg: status.update(styled(msg)))
            _STATUS.append(status)
            try:
                result = body()
            finally:
                _STATUS.remove(status)
        sys.stdout.flush()  # a closed pipe is met here, not at the interpreter's exit
        return result
    except BrokenPipeError:  # stdout's reader went away (`| head`): end quietly
        raise typer.Exit(quiet_pipe()) from None
    except (ToolError, StoreUnreachable) as exc:  # the latter: the session was left resumable
        raise fail(f"{exc}{_note(exc)}") from None
    except ServerLost as exc:  # the session was left resumable; not bad input, not a bug
        raise fail(f"{exc}{_note(exc)}", code=1) from None
    except typer.BadParameter as exc:  # bad input too, whoever raised it
        raise fail(exc.format_message()) from None
    except Interrupted as exc:  # the session stopped its servers; resume continues it
        err.print(styled((outside(f"{exc}{exc.note}"), "yellow")), highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:  # Ctrl-C where no session caught it (Typer would exit 130 silently)
        err.print(styled(("interrupted by SIGINT", "yellow")), highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:  # a bug: one line, the traceback on request, the session resumable
        if os.environ.get("PERFLOOP_DEBUG"):
            raise
        stopped = _note(exc) or "; a session it stopped continues with `perfloop resume SESSION`"
        err.print(
            styled(
                ("internal error:", "red"),
                f" {outside(one_line(exc) + stopped)} (PERFLOOP_DEBUG=1 shows the traceback)",
            ),
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(3) from None


def _note(exc: BaseException) -> str:
    """What the session did about an exception that ended it (its servers stopped, how to resume;
    `agent/sessions/runner.py`), or "" when none ran."""
    return str(getattr(exc, "perfloop_session_note", ""))  # agent.sessions.interrupts.NOTE


def stored_sessions() -> StoredSessions:
    """The store's sessions read without LangGraph's graph, opened with the graph and its
    checkpointer (agent.sessions.runner) only when a session's checkpoints need them."""
    from agent.sessions.reading.stored import StoredSessions

    def graphed(s: StoredSessions) -> StoredSessions:
        from agent.sessions.runner import Sessions

        return Sessions(s.home, s.store)

    return StoredSessions(graphed=graphed)
