"""`perfloop show SESSION`: a session's transitions, measurements, decisions, the attempts cut short,
its summary, what it would run on this machine, and (`--diff [N]`) a proposal's patch alone."""

from __future__ import annotations

import shlex
import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from agent.cli.ids import SessionArg
from agent.cli.options import Json
from agent.cli.output import console, emit, table
from agent.cli.running import run_command, stored_sessions
from tools.errors import ConfigError, NotReplayable, ToolError, one_line

if TYPE_CHECKING:  # the store and the state load inside the command; LangGraph only for checkpoints
    from agent.sessions.reading.stored import StoredSessions
    from state.door.records import ToolCallRecord
    from state.sessions.loop import LoopState
    from state.sessions.session import SessionInfo


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
    """Show a session: transitions, measurements, patches, decisions (--diff [N]: a patch alone)."""

    def body() -> None:
        from agent.cli.render import approval, runs
        from agent.sessions.trust.listed import one
        from tools import progress
        from tools.workspace.hidden import visible

        s = stored_sessions()  # an imported recording's states as kept: no LangGraph, no replay
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
                progress.set_reporter(lambda _message: None)  # a replay to read it: no step shown
                state = s.last_state(session)
            except Exception as bad:
                raise NotReplayable(
                    f"{exc}; and its recording does not replay here ({one_line(bad)})"
                ) from None
        calls = s.store.tool_calls(session)
        cuts = interruptions(s.store.tool_calls(session, include_superseded=True), calls, state)
        pending = s.pending_approval(session)  # as stored now, with the argv it runs and its digest
        bound = runs_here(s, session, state)  # what this machine would run, and whether it is signed
        # the row is not signed: its status and summary as the signed checkpoint supports, as
        # `perfloop sessions` lists it, what of the row is not shown named in a line
        info, _, row = one(s.store, s.home, info)
        if as_json:
            shown = show_json(info, state, calls, cuts)
            emit(
                {
                    "headline": shown["session"]["headline"],
                    **shown,
                    "pending_approval": pending,
                    "runs": bound,
                    "store_row": row,
                }
            )
        else:
            out = console()
            session_view(out, info, state, calls, cuts)
            if pending is not None:
                approval(out, pending)
            runs(out, bound)
            if row is not None:
                out.print(row, highlight=False, markup=False, soft_wrap=True)

    run_command(body)


def runs_here(s: StoredSessions, session: str, state: LoopState) -> dict:
    """What the session would run here (launch command, environment, the options that drive it,
    next nodes, tasks, writes) and whether this user's key signed it (agent/sessions/trust/)."""
    digest, why, upcoming, nxt = s.checkpoint_status(session)
    opts = state.options
    return {
        "argv": state.argv,
        "env": state.target.launch.env,
        "pass_env": state.target.launch.pass_env,
        "host": state.target.host.model_dump(mode="json"),
        "options": {k: getattr(opts, k) for k in ("approve", "max_iterations", "python", "launch_allowlist")}
        | {"session_dir": str(opts.session_dir), "playbook_dirs": [str(p) for p in opts.playbook_dirs]},
        "next": nxt,
        "tasks": upcoming["tasks"],
        "writes": upcoming["writes"],
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


def show_json(info: SessionInfo, state: LoopState, calls: list[ToolCallRecord], cuts: list[dict]) -> dict:
    """`perfloop show --json`: the session as `sessions --json` lists it (one speedup, the judged
    one), its transitions, measurements, decisions, and the attempts cut short (`interruptions`)."""
    from agent.cli.render import session_json
    from agent.proposer.chain import chain_of
    from agent.proposer.tuning.search import trial_lines

    return {
        "session": session_json(info),
        "parent": info.parent,
        "transitions": [t.model_dump(mode="json") for t in state.transitions],
        "measurements": [
            m.model_dump(mode="json", exclude={"requests"})
            for m in (state.baseline, state.reference, state.candidate_measurement)
            if m
        ],
        "decisions": [{**d.model_dump(mode="json"), "label": d.label} for d in state.decisions],
        "launch_noise": state.launch_noise.model_dump(mode="json") if state.launch_noise else None,
        "power": state.power.model_dump(mode="json") if state.power else None,
        "mechanisms": [m.model_dump(mode="json") for m in state.mechanisms],
        "trials": [t.model_dump(mode="json") for t in state.trials],
        "search_trials": trial_lines(state),
        "chain": chain.model_dump(mode="json") if (chain := chain_of(state)) is not None else None,
        "accepted_commits": [c.model_dump(mode="json") for c in state.accepted],
        "profiles": [p.model_dump(mode="json") for p in state.profiles],
        "tool_calls": len(calls),
        "llm_tokens": state.llm_usage.tokens,
        "llm_usage": state.llm_usage.model_dump(mode="json"),
        "model_trials": [t.model_dump(mode="json") for t in state.model_trials],
        "interruptions": cuts,
    }


def session_view(
    console: Console, info: SessionInfo, state: LoopState, calls: list[ToolCallRecord], cuts: list[dict]
) -> None:
    """`perfloop show`: transitions, decisions, what was kept, the attempts cut short, the summary."""
    from agent.cli.render import summary
    from agent.decision.stats.noise import session_line
    from agent.proposer.tuning.search import trial_lines

    if info.parent:
        console.print(f"forked from session {info.parent}")
    steps = [
        (str(n), tr.at.strftime("%H:%M:%S"), tr.node, tr.note) for n, tr in enumerate(state.transitions, 1)
    ]
    title = f"session {info.id}: transitions"
    console.print(table("#", "time (UTC)", "node", "what happened", rows=steps, keep=3, title=title))
    rows = []
    for dec in state.decisions:
        j = dec.judgement
        ci = f"{j.last.speedup:.2f}x [{j.last.ci_low:.2f}, {j.last.ci_high:.2f}]" if j else "-"
        looks = (
            "; ".join(f"{lk.look}/{lk.of}: n={lk.requests_candidate} {lk.verdict}" for lk in j.looks)
            if j
            else "-"
        )
        predicted = "-" if dec.predicted_speedup is None else f"{dec.predicted_speedup:.2f}x"
        rows.append((str(dec.iteration), dec.label, dec.verdict, ci, looks, predicted, dec.reason))
    header = ("iter", "playbook", "verdict", "speedup [CI]", "looks", "predicted", "reason")
    console.print(table(*header, rows=rows, keep=2, whole=(3,), below=(6,), lead=2, title="decisions"))
    used = [x.judgement.launch_noise for x in state.decisions if x.judgement is not None]
    if (noise := session_line(state.launch_noise, used)) is not None:  # what the decisions used
        console.print(noise, highlight=False)
    if state.power is not None:
        console.print(state.power.line(), highlight=False)
    for m in state.mechanisms:
        console.print(f"predicted vs realized, {m.playbook}: {m.note}", highlight=False)
    for c in state.accepted:
        console.print(f"accepted commit {c.sha[:10]} on {c.branch}: {c.subject}")
    for line in trial_lines(state):
        console.print(f"search trial {line}", highlight=False)
    launched = "accepted launch options" if state.launch_argv else "the target's"
    console.print(f"session launch command ({launched}): " + shlex.join(state.argv), highlight=False)
    for cut in cuts:
        console.print(interruption_line(cut, info.id), highlight=False)
    console.print(f"{len(calls)} tool calls recorded; status {info.status}")
    u = state.llm_usage
    if u.calls:
        console.print(
            f"model: {u.calls} calls, {u.prompt_tokens} prompt + {u.completion_tokens} completion "
            f"= {u.tokens} tokens, {u.seconds:.1f} s"
        )
    if info.summary:
        summary(console, info.summary)


def signalled(call: ToolCallRecord) -> bool:
    """Whether a signal cut this call short: recorded with neither an output nor an error (pure)."""
    return call.output is None and call.error is None


def interruptions(every: list[ToolCallRecord], current: list[ToolCallRecord], state: LoopState) -> list[dict]:
    """The attempts of the session cut short (pure): the calls a resume superseded (made again)
    and, while the session is interrupted and not resumed yet, those after its last finished step,
    split after each call a signal cut; when (the end of its last call, UTC), in which step and
    call, whether a signal ended it inside that call (else it was killed, or stopped between
    calls, and several such attempts in a row read as one), its calls and its server launches."""
    kept = {c.seq for c in current}
    runs: list[list[ToolCallRecord]] = []
    for c in every:
        if c.seq in kept and not (state.status == "interrupted" and c.seq >= state.calls_done):
            continue
        last = runs[-1][-1] if runs else None
        if (
            last is not None
            and last.seq == c.seq - 1
            and (c.seq in kept) == (last.seq in kept)
            and not signalled(last)
        ):
            runs[-1].append(c)
        else:
            runs.append([c])
    if state.status == "interrupted" and not (runs and runs[-1][-1].seq in kept) and every:
        runs.append([every[-1]])  # cut between calls: the last call is the nearest record of it
    return [
        {
            "at": (last.started_at + timedelta(seconds=last.duration_s)).isoformat(),
            "step": last.node,
            "call": last.name,
            "signal": signalled(last),
            "calls": len(run),
            "server_launches": sum(1 for c in run if c.name == "server.launch"),
            "resumed": last.seq not in kept,
        }
        for run in runs
        for last in [run[-1]]
    ]


def interruption_line(cut: dict, session: str) -> str:
    """One attempt cut short, as `show` prints it (pure)."""
    at = datetime.fromisoformat(cut["at"]).strftime("%Y-%m-%d %H:%M:%S")
    then = (
        f"{cut['calls']} tool call(s) and {cut['server_launches']} server launch(es) of that attempt, "
        "made again on resume"
        if cut["resumed"]
        else f"not resumed yet: perfloop resume {session}"
    )
    if cut["signal"]:
        return f"interrupted at about {at} UTC in step {cut['step']} (during {cut['call']}); {then}"
    return (
        f"cut short (killed, or interrupted between calls) after {at} UTC in step {cut['step']} "
        f"(its last call {cut['call']}); {then}"
    )
