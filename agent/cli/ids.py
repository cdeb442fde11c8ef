"""Session ids as a person types them: the one resolver every command that takes a session uses.

An id (`20261202-204512-a1b2`), a unique prefix of one (`20261202-2045`, `a` is ambiguous once
there are two), `last` (the newest session in the store) or `last~N` (the N-th before it, as git's
`HEAD~N`). Resolved when the command line is parsed, so a command body sees a full id; a name that
matches none, or several, is one line and exit 2. The shorthands (`last`, a prefix) name only this
machine's sessions (those with a folder under $PERFLOOP_HOME/sessions, which a store peer cannot
make): another machine's session, or one a peer planted in a shared store, is named by its full id.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.running import fail
from tools.errors import ToolError

LAST = re.compile(r"last(?:~(\d+))?")
SHOWN = 6
"""Candidates named in an ambiguous prefix's error."""


def resolve(ids: list[str], text: str, mine: set[str] | None = None) -> str:
    """The id `text` names among `ids` (oldest first) (pure): a shorthand among those in `mine`
    (this machine's; None: all); ToolError when it names none or several."""
    from state.sessions.ids import session_id_problem

    local = ids if mine is None else [i for i in ids if i in mine]
    if m := LAST.fullmatch(text):
        back = int(m.group(1) or 0)
        if back >= len(local):
            raise ToolError(
                f"{text}: the store holds {len(local)} session(s) of this machine; perfloop sessions "
                "lists every machine's: name another machine's by its full id"
            )
        return local[-1 - back]
    if problem := session_id_problem(text):  # a path, a quote: refused as the store would refuse it
        raise ToolError(f"SESSION: {problem}")
    if text in ids:
        return text
    hits = [i for i in local if i.startswith(text)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ToolError(
            f"no session {text!r} of this machine in the store (perfloop sessions lists every "
            "machine's: name another machine's by its full id)"
        )
    more = f", ... ({len(hits)} in all)" if len(hits) > SHOWN else ""
    raise ToolError(f"{text!r} is the start of several sessions: {', '.join(hits[:SHOWN])}{more}")


STAMP = re.compile(r"(\d{8}-\d{6})")


def local_order(ids: list[str], home: Path) -> list[str]:
    """`ids` oldest first by what this machine knows (issue 56): a session of this machine by the
    time its id was made here (`YYYYMMDD-HHMMSS`, the name of its folder under
    $PERFLOOP_HOME/sessions), else by its folder's change time; not by the store's `created_at`,
    which a store peer can rewrite to make an old session `last`."""

    def when(i: str) -> tuple[str, float, str]:
        folder = home / "sessions" / i
        stamp = m.group(1) if (m := STAMP.search(i)) else ""
        try:
            return stamp, folder.stat().st_ctime, i
        except OSError:
            return stamp, 0.0, i

    return sorted(ids, key=when)


def resolve_in_store(text: str) -> str:
    """The full id `text` names in this process's store (opened here, when a command line names a
    session: not at start-up)."""
    from tools.store.sessions import SessionStore, perfloop_home

    home = perfloop_home()
    store = SessionStore.open(home)
    try:
        ids = local_order([i.id for i in store.list_sessions()], home)
        return resolve(ids, text, {i for i in ids if (home / "sessions" / i).is_dir()})
    finally:
        store.close()


def _callback(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return resolve_in_store(value)
    except ToolError as exc:
        raise fail(str(exc)) from None
    except Exception:  # an unreadable store or entry: the command's body says what, in one line
        return value


SessionArg = Annotated[
    str,
    typer.Argument(
        metavar="SESSION",
        help="A session id, a unique prefix of one, last (the newest) or last~N (the N-th before it).",
        callback=_callback,
        show_default=False,
    ),
]
"""The SESSION argument of every command that takes one."""
