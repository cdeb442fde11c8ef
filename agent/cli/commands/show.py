"""`perfloop show SESSION`: a session's transitions, measurements, decisions and summary, what it
would run on this machine, and (`--diff [N]`) a proposal's patch alone."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from agent.cli import terminal
from agent.cli.ids import SessionArg
from agent.cli.options import Json
from agent.cli.output import console, emit
from agent.cli.running import run_command
from tools.errors import ConfigError, NotReplayable, ToolError, one_line

if TYPE_CHECKING:  # the store, the loop and the state load inside the command
    from agent.sessions.runner import Sessions
    from state.sessions.loop import LoopState


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
        from agent.cli import render
        from agent.sessions.runner import Sessions
        from tools.workspace.hidden import visible

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
    from agent.sessions.signing import status

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


def diff_or_launch(history: list[LoopState], number: int | None) -> str:
    """Proposal `number`'s patch (the last without it); for a proposal of launch options, which
    has no patch, its flag change and both commands (pure)."""
    from agent.report.headline import flag_change
    from agent.sessions.diffs import pick, proposal_diffs

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
