"""CLI commands for durable sessions: replay, export, import, fork."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from agent import render
from agent.archive import export_session, import_session
from agent.cli import Json, _finish, _run, app, err
from agent.session import Sessions, new_session_id
from tools.door.replay import ReplayDivergence


@app.command()
def replay(session: str, as_json: Json = False) -> None:
    """Run a recorded session again with every tool call answered from its recording (no host)."""

    def body():
        s = Sessions()
        info = s.info(session)
        try:
            state, summary = s.replay(session)
        except ReplayDivergence as exc:
            err.print(f"[red]replay diverged:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        recorded = info.summary
        same = recorded is not None and recorded.model_dump() == summary.model_dump()
        render.summary(Console(), summary)
        verdict = "same summary as recorded" if same else "DIFFERENT summary than recorded"
        Console(stderr=True).print(f"replayed {len(state.transitions)} transitions: {verdict}")
        if as_json:
            print(json.dumps({**summary.model_dump(mode="json"), "matches_recording": same}))
        if not same:
            raise typer.Exit(1)

    _run(body)


@app.command("export")
def export_cmd(
    session: str,
    output: Annotated[Path, typer.Option("-o", "--output", help="File to write (.json or .json.gz).")],
) -> None:
    """Write a recorded session to one file, to import and replay it on another machine."""

    def body():
        n = export_session(Sessions().store, session, output)
        Console().print(f"exported session {session} ({n} tool calls) to {output}")

    _run(body)


@app.command("import")
def import_cmd(file: Path) -> None:
    """Import a session exported with `perfloop export`; then `perfloop replay` it."""

    def body():
        sid = import_session(Sessions().store, file)
        Console().print(f"imported session {sid}; replay it with `perfloop replay {sid}`")

    _run(body)


@app.command()
def fork(
    session: str,
    at: Annotated[
        str,
        typer.Option(
            "--at",
            help="Step to continue at: profile, diagnose, propose or approve (STEP#N: its N-th visit).",
        ),
    ],
    approve: Annotated[str | None, typer.Option(help="auto or manual (default: the parent's).")] = None,
    as_json: Json = False,
) -> None:
    """Start a new session from a checkpoint of an ended one, and run it live."""

    def body():
        if approve not in (None, "auto", "manual"):
            raise typer.BadParameter("--approve must be auto or manual")
        s = Sessions()
        state = s.fork(session, at, new_session_id(), approve)
        _finish(s, state, as_json)

    _run(body)
