"""Commands over recorded sessions: list, show, replay, export, import, fork."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agent.cli import terminal
from agent.cli.commands.show import show
from agent.cli.ids import SessionArg
from agent.cli.options import Json, Trust
from agent.cli.output import console, emit
from agent.cli.running import choice, err, run_command, stored_sessions

if TYPE_CHECKING:  # the store, the loop and the state load inside the commands that read them
    from agent.sessions.reading.stored import StoredSessions
    from state.sessions.session import Summary


def not_compared(recorded: Summary, replayed: Summary | None = None) -> set[str]:
    """The summary fields a replay does not compare with this recorded summary: those that the
    summary did not have yet when it was recorded, and the launches of attempts cut short that an
    imported recording does not hold (`perfloop export` writes the calls of the finished ones) (pure)."""
    skip = set()
    if replayed is not None and recorded.server_launches > replayed.server_launches:
        skip.add("server_launches")
    if not recorded.launch_argv:  # recorded before the summary kept the launch command (never empty since)
        skip.add("launch_argv")
    if recorded.workload is not None and recorded.objective is None:  # before `speedup` was the objective's
        skip |= {"speedup", "objective", "objective_before", "objective_after"}
        skip |= {"tpot_ms_p99_before", "tpot_ms_p99_after"}
    if recorded.speedup_ci is not None and recorded.speedup_judged is None:  # recorded before it
        skip.add("speedup_judged")
    if recorded.outputs_identical is not None and not recorded.accepted:  # before it was None then
        skip.add("outputs_identical")
    if not recorded.floors:  # recorded before the summary kept the steps' bandwidth floors
        skip.add("floors")
    return skip


WORDING = frozenset(
    {
        "decision",
        "power",
        "arms",
        "output_gate",
        "correctness_set",
        "mechanisms",
        "unexplained_gains",
        "stop_reason",
    }
)
"""Summary fields that explain in words what the other fields decided: a replay by a later
perfloop may word them differently (a noise phrase reworded, a mechanism's prediction refined)
and still decide the same; every other field (verdicts, speedups and their intervals, what was
kept and committed, launches) must equal the recording's."""


def differing(recorded: Summary, replayed: Summary, skip: set[str]) -> set[str]:
    """The compared summary fields whose values differ (pure)."""
    a, b = recorded.model_dump(exclude=skip), replayed.model_dump(exclude=skip)
    return {k for k in a.keys() | b.keys() if not same(a.get(k), b.get(k))}


FILLED = ("speedup_judged", "launch_argv")
"""Summary fields an import takes from the recording's replay where its perfloop did not record
them yet (`not_compared`): so that `sessions`, `show` and `replay` give one speedup."""


def filled(recorded: Summary, replayed: Summary) -> Summary:
    """The recorded summary with the `FILLED` fields it lacks taken from a replay that decided as
    it did (else unchanged) (pure)."""
    skip = not_compared(recorded, replayed)
    if differing(recorded, replayed, skip) - WORDING:
        return recorded
    return recorded.model_copy(update={k: getattr(replayed, k) for k in FILLED if k in skip})


def import_recording(s: StoredSessions, file: Path) -> str:
    """`perfloop import`: the recording into the store, its summary `filled` from its replay where
    its perfloop did not record a field yet; the session id. The replay's states are kept for
    `show` and `report` (agent/sessions/reading/replayed.py), which then read them without replaying."""
    from agent.sessions.archive import import_session
    from tools import progress
    from tools.door.replay import ReplayDivergence
    from tools.errors import ConfigError

    sid = import_session(s.store, file)
    s.session_dir(sid).mkdir(parents=True, exist_ok=True)  # this machine's: `last` names it
    info = s.info(sid)
    fill = info.summary is not None and any(k in not_compared(info.summary) for k in FILLED)
    if not fill:  # replayed only to keep its states: no step shown, nothing it raises told
        progress.set_reporter(lambda _message: None)
    try:  # no host, no file: the recording alone
        _, replayed = s.replay(sid, kept=True)
        if fill and info.summary is not None:
            s.store.put_session(info.model_copy(update={"summary": filled(info.summary, replayed)}))
    except (ReplayDivergence, ConfigError, ValueError, KeyError):
        pass  # kept as recorded (the import stands); `perfloop replay` says why
    except Exception:
        if fill:
            raise
    return sid


def same(a: object, b: object) -> bool:
    """Equal, floats to 1e-12 relative (a sum taken in another order since) (pure)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


READ_BACK = (
    "(replayed earlier with these same sources, libraries and recording: read back; --again runs the graph)"
)
"""What `replay` adds to its line when it read the replay kept under the key it would run with."""


def replay(
    session: SessionArg,
    as_json: Json = False,
    again: Annotated[
        bool,
        typer.Option("--again", help="Run the graph even when a replay with these same sources is kept."),
    ] = False,
) -> None:
    """Run a recorded session again with every tool call answered from its recording (no host)."""

    def body() -> None:
        from agent.cli import render
        from agent.report.headline import headline_json, summary_json
        from tools.door.replay import ReplayDivergence

        s = stored_sessions()  # a replay in memory: no checkpointer (agent/sessions/reading/replaying.py)
        info = s.info(session)
        session_id = info.id
        try:  # read back when kept under the key it would run with (replayed.py), then no LangGraph
            state, summary, read_back = s.replay_or_read(session, again)
        except ReplayDivergence as exc:
            err.print(
                terminal.styled(("replay diverged:", "red"), f" {exc}"), highlight=False, soft_wrap=True
            )
            raise typer.Exit(1) from None
        recorded = info.summary
        skip = not_compared(recorded, summary) if recorded is not None else set()
        differ = differing(recorded, summary, skip) if recorded is not None else {"summary"}
        same, worded = not differ - WORDING, sorted(differ & WORDING)
        render.summary(console(as_json), summary)
        verdict = "same summary as recorded" if same else "DIFFERENT summary than recorded"
        if same and worded:
            verdict = f"same decisions as recorded (worded differently now: {', '.join(worded)})"
        said = f"replayed {len(state.transitions)} transitions: {verdict}"
        terminal.console(stderr=True).print(
            f"{said} {READ_BACK}" if read_back else said, soft_wrap=True
        )  # one line at any width: a script reads it
        if as_json:
            head = headline_json(summary, session_id, info.status)
            emit(
                {
                    **summary_json(summary),
                    "headline": head,
                    "matches_recording": same,
                    "worded_differently": worded,
                    "read_back": read_back,
                }
            )
        if not same:
            raise typer.Exit(1)

    run_command(body)


def export_cmd(
    session: SessionArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="File to write (.json or .json.gz).")],
) -> None:
    """Write a recorded session to one file, to import and replay it on another machine."""

    def body() -> None:
        from agent.sessions.archive import export_session
        from tools.store.sessions import SessionStore, perfloop_home

        n = export_session(SessionStore.open(perfloop_home()), session, output)  # no graph to load
        console().print(f"exported session {session} ({n} tool calls) to {output}")

    run_command(body)


def import_cmd(file: Path) -> None:
    """Import a session exported with `perfloop export`; then `perfloop replay` it."""

    def body() -> None:

        sid = import_recording(stored_sessions(), file)
        console().print(
            f"imported session {sid}; replay it with `{terminal.perfloop()} replay {sid}`", highlight=False
        )

    run_command(body)


def fork(
    session: SessionArg,
    at: Annotated[
        str,
        typer.Option(
            "--at",
            help="Step to continue at: profile, diagnose, propose or approve (STEP#N: its N-th visit).",
        ),
    ],
    approve: Annotated[str | None, typer.Option(help="auto or manual (default: the parent's).")] = None,
    as_json: Json = False,
    trust: Trust = None,
) -> None:
    """Start a new session from a checkpoint of an ended one, and run it live."""

    def body() -> None:
        from agent.cli.common import finish
        from agent.sessions.runner import Sessions, new_session_id

        if approve is not None:
            choice("approve", approve, ("auto", "manual"))
        s = Sessions()
        s.trust = trust
        state = s.fork(session, at, new_session_id(), approve)
        finish(s, state, as_json)

    run_command(body)


def sessions(as_json: Json = False) -> None:
    """List the store's sessions (of every machine using it), with the host and status."""

    def body() -> None:
        from agent.cli import render
        from tools.store.sessions import SessionStore, perfloop_home

        home = perfloop_home()
        store = SessionStore.open(home)  # the index and the signatures: no graph, no LangGraph to load
        infos, held = store.list_sessions(), store.held()
        if infos:  # each row beside what this user's key signed of it (its rows are not signed)
            from agent.sessions.trust.listed import checked

            rows = checked(store, home, infos)
        else:
            rows = []
        if as_json:
            emit(
                [
                    render.session_json(i) | {"held_by": held.get(i.id), "signed": signed, "store_row": row}
                    for i, signed, row in rows
                ]
            )
            return
        out = console()
        unverified = {i.id for i, signed, row in rows if row is not None and not signed}
        render.sessions(out, [i for i, _, _ in rows], held, unverified)
        for i, _, row in rows:
            if row is not None:
                out.print(f"{i.id}: {row}", highlight=False, markup=False, soft_wrap=True)

    run_command(body)


def abandon_cmd(session: str, trust: Trust = None) -> None:
    """Give up a running, paused or interrupted session: its servers stopped, the checkout back as
    the session found it (instrumentation removed, the branch it started on, your uncommitted
    changes kept; the session branch kept if it holds commits)."""

    def body() -> None:
        from agent.sessions.holding import abandon
        from agent.sessions.runner import Sessions

        s = Sessions()
        s.trust = trust
        s.verify(session)  # it stops the servers and moves the checkout its state names
        print(abandon(s, session))

    run_command(body)


COMMANDS = {
    "sessions": sessions,
    "show": show,
    "replay": replay,
    "export": export_cmd,
    "import": import_cmd,
    "fork": fork,
    "abandon": abandon_cmd,
}
