"""Commands over recorded sessions: list, show, replay, export, import, fork."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from agent.cli import render, terminal
from agent.cli.common import Json, Trust, choice, err, finish, run_command
from agent.cli.ids import SessionArg
from agent.cli.output import console, emit
from agent.report.headline import flag_change, summary_json
from agent.sessions.archive import export_session, import_session
from agent.sessions.diffs import pick, proposal_diffs
from agent.sessions.holding import abandon
from agent.sessions.runner import Sessions, new_session_id
from agent.sessions.signing import status
from state.sessions.loop import LoopState
from state.sessions.session import SessionInfo, Summary
from tools.door.replay import ReplayDivergence
from tools.errors import ConfigError, NotReplayable, ToolError, one_line
from tools.workspace.hidden import visible


def not_compared(recorded: Summary) -> set[str]:
    """The summary fields a replay does not compare with this recorded summary: those that the
    summary did not have yet when it was recorded (pure)."""
    skip = set()
    if not recorded.launch_argv:  # recorded before the summary kept the launch command (never empty since)
        skip.add("launch_argv")
    if recorded.workload is not None and recorded.objective is None:  # before `speedup` was the objective's
        skip |= {"speedup", "objective", "objective_before", "objective_after"}
        skip |= {"tpot_ms_p99_before", "tpot_ms_p99_after"}
    if recorded.speedup_ci is not None and recorded.speedup_judged is None:  # recorded before it
        skip.add("speedup_judged")
    if recorded.outputs_identical is not None and not recorded.accepted:  # before it was None then
        skip.add("outputs_identical")
    return skip


def replay(session: SessionArg, as_json: Json = False) -> None:
    """Run a recorded session again with every tool call answered from its recording (no host)."""

    def body() -> None:
        s = Sessions()
        info = s.info(session)
        try:
            state, summary = s.replay(session)
        except ReplayDivergence as exc:
            err.print(
                terminal.styled(("replay diverged:", "red"), f" {exc}"), highlight=False, soft_wrap=True
            )
            raise typer.Exit(1) from None
        recorded = info.summary
        skip = not_compared(recorded) if recorded is not None else set()
        same = recorded is not None and recorded.model_dump(exclude=skip) == summary.model_dump(exclude=skip)
        render.summary(console(as_json), summary)
        verdict = "same summary as recorded" if same else "DIFFERENT summary than recorded"
        terminal.console(stderr=True).print(f"replayed {len(state.transitions)} transitions: {verdict}")
        if as_json:
            emit({**summary_json(summary), "matches_recording": same})
        if not same:
            raise typer.Exit(1)

    run_command(body)


def export_cmd(
    session: SessionArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="File to write (.json or .json.gz).")],
) -> None:
    """Write a recorded session to one file, to import and replay it on another machine."""

    def body() -> None:
        n = export_session(Sessions().store, session, output)
        console().print(f"exported session {session} ({n} tool calls) to {output}")

    run_command(body)


def import_cmd(file: Path) -> None:
    """Import a session exported with `perfloop export`; then `perfloop replay` it."""

    def body() -> None:
        s = Sessions()
        sid = import_session(s.store, file)
        s.session_dir(sid).mkdir(parents=True, exist_ok=True)  # this machine's: `last` names it
        console().print(f"imported session {sid}; replay it with `perfloop replay {sid}`")

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
        if approve is not None:
            choice("approve", approve, ("auto", "manual"))
        s = Sessions()
        s.trust = trust
        state = s.fork(session, at, new_session_id(), approve)
        finish(s, state, as_json)

    run_command(body)


def _listed(info: SessionInfo, held_by: str | None) -> dict:
    """A session as `sessions --json` lists it: its summary's `speedup` the judged one."""
    out = info.model_dump(mode="json") | {"held_by": held_by}
    if info.summary is not None:
        out["summary"] = summary_json(info.summary)
    return out


def diff_or_launch(history: list[LoopState], number: int | None) -> str:
    """Proposal `number`'s patch (the last without it); for a proposal of launch options, which
    has no patch, its flag change and both commands (pure)."""
    diffs = proposal_diffs(history)
    if (diffs and number is None) or (number is not None and 1 <= number <= len(diffs)):
        chosen = diffs[-1 if number is None else number - 1]
        launch = [st for st in history if st.proposal is not None and st.proposal.launch_argv is not None]
        if not chosen.diff and (
            mine := [st for st in launch if st.proposal and st.proposal.source == chosen.source]
        ):
            st, p = mine[0], mine[0].proposal
            assert p is not None and p.launch_argv is not None
            return (
                f"# proposal {chosen.number} ({chosen.source}) changes launch options, not code\n"
                f"launch options: {flag_change(st.argv, p.launch_argv)}\n"
                f"now:      {shlex.join(st.argv)}\nproposed: {shlex.join(p.launch_argv)}\n"
            )
    return pick(diffs, number).diff


def sessions(as_json: Json = False) -> None:
    """List the store's sessions (of every machine using it), with the host and status."""

    def body() -> None:
        store = Sessions().store
        infos, held = store.list_sessions(), store.held()
        if as_json:
            emit([_listed(i, held.get(i.id)) for i in infos])
        else:
            render.sessions(console(), infos, held)

    run_command(body)


def show(
    session: SessionArg,
    # `--diff [N]`: N is an argument, not --diff's value (typer never passes click's `flag_value`
    # on, so an option cannot take an optional value); it may come before or after --diff
    number: Annotated[
        int | None,
        typer.Argument(
            metavar="N",
            min=1,
            show_default=False,
            help="With --diff: the N-th proposal's patch (default: the last).",
        ),
    ] = None,
    as_json: Json = False,
    diff: Annotated[
        bool,
        typer.Option("--diff", help="Print a proposal's patch as a plain unified diff, and nothing else."),
    ] = False,
) -> None:
    """Show a session: transitions in order, measurements, patches, decisions (--diff [N]: the N-th
    proposal's patch alone, the last without N)."""

    def body() -> None:
        s = Sessions()
        if number is not None and not diff:
            raise ToolError(f"N ({number}) selects a proposal's patch: add --diff (show SESSION --diff N)")
        if diff:  # applied if a human edited it, else proposed; `approve --patch` takes it back
            sys.stdout.write(visible(diff_or_launch(s.history(session), number)))  # as text
            return
        info = s.info(session)
        try:
            state = s.state(session)
        except ConfigError as exc:  # an imported session has no checkpoints here: its replay's last state
            try:
                state = s.history(session)[-1]
            except Exception as bad:
                raise NotReplayable(
                    f"{exc}; and its recording does not replay here ({one_line(bad)})"
                ) from None
        calls = s.store.tool_calls(session)
        pending = s.pending_approval(session)  # as stored now, with the argv it runs and its digest
        bound = runs_here(s, session, state)  # what this machine would run, and whether it is signed
        if as_json:
            emit(render.show_json(info, state, calls) | {"pending_approval": pending, "runs": bound})
        else:
            out = console()
            render.show(out, info, state, calls)
            if pending is not None:
                render.approval(out, pending)
            runs(out, bound)

    run_command(body)


def runs_here(s: Sessions, session: str, state: LoopState) -> dict:
    """What the session would run on this machine (its whole launch command, environment and the
    options that drive it) and whether this user's key signed it (agent/sessions/signing.py)."""
    snap = s.graph.get_state(s.config(session))
    digest, why = (
        status(session, snap.values, dict(snap.metadata or {}), s.home)
        if snap.values
        else (None, "no checkpoint")
    )
    opts = state.options
    return {
        "argv": state.argv,
        "env": state.target.launch.env,
        "pass_env": state.target.launch.pass_env,
        "host": state.target.host.model_dump(mode="json"),
        "options": {k: getattr(opts, k) for k in ("approve", "max_iterations", "python", "launch_allowlist")}
        | {"session_dir": str(opts.session_dir), "playbook_dirs": [str(p) for p in opts.playbook_dirs]},
        "digest": digest,
        "signed": why is None,
        "unsigned_because": why,
    }


def abandon_cmd(session: str, trust: Trust = None) -> None:
    """Give up a running, paused or interrupted session: its servers stopped, the checkout back as
    the session found it (instrumentation removed, the branch it started on, your uncommitted
    changes kept; the session branch kept if it holds commits)."""

    def body() -> None:
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


def runs(console: Console, bound: dict) -> None:
    """What the session runs on this machine, whole, and whether this user's key signed it."""
    console.print(
        terminal.styled(("runs on this machine:", "bold"), " " + shlex.join(bound["argv"])), highlight=False
    )
    env = " ".join(f"{k}={v}" for k, v in bound["env"].items()) or "(none)"
    console.print(
        f"  environment: {env}; passed from yours: {', '.join(bound['pass_env']) or '(none)'}",
        highlight=False,
    )
    console.print(f"  host: {bound['host']}", highlight=False)
    console.print("  options: " + ", ".join(f"{k}={v}" for k, v in bound["options"].items()), highlight=False)
    if bound["signed"]:
        console.print(f"  signed by this user's key: yes (digest {bound['digest']})", highlight=False)
    elif bound["digest"] is not None:
        console.print(
            terminal.styled((f"  NOT signed by this user's key: {bound['unsigned_because']}", "bold red")),
            highlight=False,
        )
        console.print(
            f"  to run it here as shown, add --trust {bound['digest']} to approve|reject|resume|fork",
            highlight=False,
        )
