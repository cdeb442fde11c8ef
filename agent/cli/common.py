"""What every command shares: running a command body, printing its result, validating choices,
and the option types that several commands take.

A command's body runs inside `run_command`: bad input (a `ToolError`, or a usage error) prints one
line on stderr and exits 2; a bug prints one line and exits 3 (PERFLOOP_DEBUG=1 shows the traceback);
a failed session exits 1, but one whose first launch failed (a port in use, a server that exits at
once: the environment's problem, nothing measured) ends like bad input, one line and exit 2.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Annotated

import typer

from agent.cli import render
from agent.cli.asking import ask, interactive
from agent.cli.output import console, emit
from agent.cli.running import choice, err, fail, run_command, status_line
from agent.report.headline import summary_json
from agent.sessions.approving import answer_session
from agent.sessions.diffs import keep, proposal_diffs
from agent.sessions.runner import Sessions
from agent.sessions.summary import first_launch_failure
from state.sessions.loop import LoopState
from tools.errors import ServerError
from tools.hosts.listeners import holders

__all__ = ["choice", "err", "fail", "finish", "run_command"]

Json = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document on stdout (what a person reads goes to stderr)."),
]
Trust = Annotated[
    str | None,
    typer.Option(
        metavar="DIGEST",
        help="Run a session this user's key did not sign (another machine's or user's, or one from "
        "before signing) if it still holds what `perfloop show` printed with this digest.",
    ),
]
Approve = Annotated[
    str | None,
    typer.Option(
        metavar="auto|manual",
        help="auto: apply proposals at once; manual: ask for approval (on a terminal in place, else "
        "the session pauses for perfloop approve). Default: demo auto; run manual.",
        show_default=False,
    ),
]
Method = Annotated[
    str,
    typer.Option(
        "--profile-method", metavar="patch|api", help="patch: instrument forward_decode; api: /start_profile."
    ),
]
Iters = Annotated[int, typer.Option(metavar="N", min=1, help="Most profile/diagnose rounds.")]
Parallel = Annotated[
    int | None,
    typer.Option(
        "--parallel",
        metavar="N",
        min=1,
        help="Most candidates tried at once on the hosts the target file lists (default: one per host).",
    ),
]
FloorMs = Annotated[
    float | None,
    typer.Option(
        metavar="MS",
        min=0.001,
        help="The step's roofline floor in ms (e.g. weights read once); stop near it.",
    ),
]
FloorFactor = Annotated[
    float, typer.Option(metavar="X", min=1.0, help="Stop once TPOT is within this factor of --floor-ms.")
]
Books = Annotated[
    list[Path] | None,
    typer.Option("--playbooks", metavar="DIR", help="Extra playbook directory (repeatable)."),
]
NoBuiltin = Annotated[
    bool, typer.Option("--no-builtin-playbooks", help="Search only --playbooks directories.")
]
HostUrl = Annotated[
    str | None,
    typer.Option("--host", metavar="URL", help="Run on this SSH host (ssh://user@host:port or ssh://ALIAS)."),
]
TrustNew = Annotated[
    bool,
    typer.Option(
        "--trust-new-host", help="Record an unknown SSH host key (a changed one is always refused)."
    ),
]
HostPython = Annotated[
    str | None,
    typer.Option(
        "--host-python",
        metavar="PATH",
        help="Interpreter on the SSH host (needs pydantic, GitPython, msgspec).",
    ),
]
ProposerOpt = Annotated[
    str | None,
    typer.Option(
        "--proposer",
        metavar="playbook|llm|auto|search",
        help="playbook: stored patches only; llm: a model writes every patch; auto: a playbook's "
        "patch when one fits, else the model; search: the launch options of the target's [search] "
        "(default: the target's [proposer] mode, else auto).",
    ),
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", metavar="NAME", help="Model name for --proposer llm|auto.")
]
BaseUrl = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL, else OpenAI).",
    ),
]
LlmSteps = Annotated[
    int | None, typer.Option("--llm-max-steps", metavar="N", min=1, help="Model calls per proposal.")
]
LlmTokens = Annotated[
    int | None,
    typer.Option(
        "--llm-max-tokens", metavar="N", min=1, help="Model tokens (prompt + completion) per session."
    ),
]
LlmApprove = Annotated[
    str | None,
    typer.Option(
        "--llm-approve",
        metavar="manual|auto",
        help="Model-written patches: manual (the default: pause for perfloop approve, even under "
        "--approve auto) or auto (follow --approve); default: the target's [proposer] approve.",
    ),
]
LlmSeconds = Annotated[
    float | None,
    typer.Option("--llm-max-seconds", metavar="SECONDS", min=1, help="Model time per proposal, in seconds."),
]


def finish(sessions: Sessions, state: LoopState, as_json: bool, workspace: Path | None = None) -> None:
    """Show where a session stands (approval request or summary; with `--json` on stderr, and the
    summary as one JSON document on stdout); keep each proposal's diff in the session folder.

    A session that failed at its first launch, leaving nothing behind, ends as bad input does:
    one line on stderr and exit 2 (with `--json`, its summary still the one document on stdout);
    `workspace` (the demo's copy of its server) is removed then."""
    keep(sessions.session_dir(state.session_id), proposal_diffs(sessions.history(state.session_id)))
    status_line(False)  # no spinner frame left before the table or the question
    pending = sessions.pending_approval(state.session_id)
    info = sessions.info(state.session_id)
    if (failure := first_launch_failure(state)) is not None and pending is None:
        if workspace is not None:
            shutil.rmtree(workspace, ignore_errors=True)
            with contextlib.suppress(OSError):
                workspace.parent.rmdir()  # `workspaces/` when it held only this one
        if as_json:
            emit(summary_json(info.summary) if info.summary else {"session": state.session_id})
        raise ServerError(launch_failure_line(state, failure))
    if pending is not None:
        render.approval(console(as_json), pending)
        if interactive(as_json):  # a person at a terminal: asked in place
            answer = ask(console(as_json), pending, sessions.session_dir(state.session_id))
            if answer is not None:
                status_line(True)
                state = answer_session(sessions, state.session_id, answer, pending.get("digest"))
                return finish(sessions, state, as_json, workspace)
    elif info.summary is not None:
        render.summary(console(as_json), info.summary)
    if as_json:
        payload = summary_json(info.summary) if info.summary else {"session": state.session_id}
        payload["status"] = info.status
        emit(payload)
    if info.status == "failed":
        raise typer.Exit(1)


def launch_failure_line(state: LoopState, failure: str) -> str:
    """The one line a first launch's failure ends with: what failed (the server's last log line, or
    the port) and what to do (pure but for reading which processes hold a local fixed port)."""
    port = state.target.launch.port
    held = holders(port) if port and state.target.host.kind == "local" else []
    if "launch.port = 0" in failure:  # the failure says what to do with the port already
        todo = "then run again"
    elif held:
        who = ", ".join(map(str, held))
        todo = f"launch.port {port} is in use by process {who}: stop it or set launch.port = 0"
    else:
        todo = "fix what its log says (the launch command, or what the server needs here) and run again"
    return (
        f"the server failed at its first launch: {failure}; {todo} "
        f"(nothing measured or left running, the repo as found; session {state.session_id})"
    )
