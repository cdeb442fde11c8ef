"""The `perfloop` command line (Typer). Errors print one line and exit 2; nothing is half-done."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from agent import render
from agent.config import DEMO_CONFIG, DEMO_SOURCE, check_repo, load_target, with_flag, with_host
from agent.remote import executor_for, remote_base
from agent.session import Sessions, new_session_id
from state.calls import ApplyArgs
from state.loop import LoopState
from tools import progress
from tools.door.registry import spec_of
from tools.errors import ToolError
from tools.secrets import redact
from tools.workspace.repo import check_patch

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Profile, diagnose, patch and measure an LLM inference server, in a loop.",
)
err = Console(stderr=True)

Approve = Annotated[str, typer.Option(help="auto: apply proposals at once; manual: pause for approval.")]
Method = Annotated[
    str, typer.Option("--profile-method", help="patch: instrument forward_decode; api: /start_profile.")
]
Iters = Annotated[int, typer.Option(min=1, help="Most profile/diagnose rounds.")]
Books = Annotated[list[Path], typer.Option("--playbooks", help="Extra playbook directory (repeatable).")]
NoBuiltin = Annotated[
    bool, typer.Option("--no-builtin-playbooks", help="Search only --playbooks directories.")
]
Json = Annotated[bool, typer.Option("--json", help="End with one JSON summary line.")]
HostUrl = Annotated[
    str | None, typer.Option("--host", help="Run on this SSH host (ssh://user@host:port or ssh://ALIAS).")
]
TrustNew = Annotated[
    bool,
    typer.Option(
        "--trust-new-host", help="Record an unknown SSH host key (a changed one is always refused)."
    ),
]
HostPython = Annotated[
    str | None,
    typer.Option("--host-python", help="Interpreter on the SSH host (needs pydantic, GitPython, msgspec)."),
]


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ToolError(f"--{name} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _run(fn):
    """Run a command body; a ToolError becomes one line on stderr and exit code 2."""
    try:
        with err.status("perfloop") as status:
            progress.set_reporter(lambda msg: status.update(msg))
            return fn()
    except ToolError as exc:
        err.print(f"[red]error:[/red] {redact(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:  # a bug: one line, the traceback on request, the session resumable
        if os.environ.get("PERFLOOP_DEBUG"):
            raise
        first = redact(str(exc)).splitlines()[0] if str(exc) else ""
        err.print(
            f"[red]internal error:[/red] {type(exc).__name__}: {first} (PERFLOOP_DEBUG=1 shows "
            "the traceback; a session it stopped continues with `perfloop resume SESSION`)",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(3) from None


def _finish(sessions: Sessions, state: LoopState, as_json: bool) -> None:
    pending = sessions.pending_approval(state.session_id)
    info = sessions.info(state.session_id)
    if pending is not None:
        render.approval(Console(), pending)
    elif info.summary is not None:
        render.summary(Console(), info.summary)
    if as_json:
        payload = info.summary.model_dump(mode="json") if info.summary else {"session": state.session_id}
        payload["status"] = info.status
        print(json.dumps(payload))
    if info.status == "failed":
        raise typer.Exit(1)


def _options(approve: str, method: str, max_iterations: int, playbooks: list[Path], no_builtin: bool) -> dict:
    _choice("approve", approve, ("auto", "manual"))
    _choice("profile-method", method, ("patch", "api"))
    return {
        "approve": approve,
        "max_iterations": max_iterations,
        "playbook_dirs": playbooks,
        "builtin_playbooks": not no_builtin,
        "python": sys.executable,
    }


@app.command()
def demo(
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    preset: Annotated[
        str, typer.Option(help="Demo server size: cpu, or glm5 (GLM-5 geometry, one H200).")
    ] = "cpu",
    approve: Approve = "auto",
    profile_method: Method = "patch",
    max_iterations: Iters = 3,
    playbooks: Books = None,
    no_builtin_playbooks: NoBuiltin = False,
    host: HostUrl = None,
    trust_new_host: TrustNew = False,
    host_python: HostPython = None,
    as_json: Json = False,
) -> None:
    """Copy the embedded MLA demo server into a workspace (on --host if given) and run the loop on it."""

    if playbooks is None:
        playbooks = []
    def body():
        _choice("device", device, ("cpu", "cuda"))
        _choice("preset", preset, ("cpu", "glm5"))
        opts = _options(approve, profile_method, max_iterations, playbooks, no_builtin_playbooks)
        sessions = Sessions()
        sid = new_session_id()
        target = with_host(load_target(DEMO_CONFIG), host, trust_new_host, host_python)
        base = remote_base(target) if target.host.kind == "ssh" else sessions.home
        target = target.model_copy(update={"repo": base / "workspaces" / sid / "mla_server"})
        argv = with_flag(with_flag(target.launch.argv, "--device", device), "--preset", preset)
        launch = target.launch.model_copy(update={"argv": argv})
        target = target.model_copy(
            update={"launch": launch, "profile": target.profile.model_copy(update={"method": profile_method})}
        )
        state = sessions.start(target, {**opts, "demo_source": DEMO_SOURCE}, sid, None)
        _finish(sessions, state, as_json)

    _run(body)


@app.command()
def run(
    target_toml: Annotated[Path, typer.Argument(help="Target config (TOML).")],
    approve: Approve = "auto",
    profile_method: Annotated[
        str | None, typer.Option("--profile-method", help="Override the config's profile method (patch|api).")
    ] = None,
    max_iterations: Iters = 3,
    playbooks: Books = None,
    no_builtin_playbooks: NoBuiltin = False,
    host: HostUrl = None,
    trust_new_host: TrustNew = False,
    host_python: HostPython = None,
    as_json: Json = False,
) -> None:
    """Run the loop on the target a TOML file describes."""

    if playbooks is None:
        playbooks = []
    def body():
        target = with_host(load_target(target_toml), host, trust_new_host, host_python)
        method = profile_method or target.profile.method
        opts = _options(approve, method, max_iterations, playbooks, no_builtin_playbooks)
        target = target.model_copy(update={"profile": target.profile.model_copy(update={"method": method})})
        check_repo(target)
        sessions = Sessions()
        state = sessions.start(target, opts, new_session_id(), target_toml.resolve())
        _finish(sessions, state, as_json)

    _run(body)


@app.command()
def resume(session: str, as_json: Json = False) -> None:
    """Continue a session from its last checkpoint."""

    def body():
        sessions = Sessions()
        if sessions.pending_approval(session) is not None:
            raise ToolError(
                f"session {session} waits for approval: `perfloop approve {session}` "
                f"or `perfloop reject {session} --reason TEXT`"
            )
        _finish(sessions, sessions.resume(session), as_json)

    _run(body)


def _answer(session: str, answer: dict, as_json: bool) -> None:
    sessions = Sessions()
    sessions.info(session)
    if sessions.pending_approval(session) is None:
        raise ToolError(
            f"session {session} is not waiting for approval (status "
            f"{sessions.info(session).status}); see `perfloop show {session}`"
        )
    _finish(sessions, sessions.resume(session, answer), as_json)


def _edited_patch(session: str, path: Path) -> str:
    """Read and validate a human-edited patch against the paused session's repo (changes nothing)."""
    try:
        diff = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"cannot read edited patch {path}: {exc}") from exc
    state = Sessions().state(session)
    args = ApplyArgs(repo=state.target.repo, diff=diff, subject="check", trailers={})
    with executor_for(state.target, state.options.session_dir) as remote:  # where the repo lives
        remote.call(spec_of(check_patch), args) if remote else check_patch(args)
    return diff


@app.command()
def approve(
    session: str,
    patch: Annotated[
        Path | None,
        typer.Option(help="Apply this edited patch instead of the proposed one (validated first)."),
    ] = None,
    as_json: Json = False,
) -> None:
    """Approve the patch a paused session proposes (or your edit of it), and continue the loop."""

    def body():
        answer = {"approved": True, "by": "human"}
        if patch is not None:
            answer |= {"diff": _edited_patch(session, patch), "reason": f"edited patch from {patch}"}
        _answer(session, answer, as_json)

    _run(body)


@app.command()
def reject(
    session: str, reason: Annotated[str, typer.Option(help="Why (recorded).")], as_json: Json = False
) -> None:
    """Reject the patch a paused session proposes, and continue the loop."""
    _run(lambda: _answer(session, {"approved": False, "by": "human", "reason": reason}, as_json))


@app.command()
def sessions(as_json: Json = False) -> None:
    """List sessions."""

    def body():
        infos = Sessions().store.list_sessions()
        if as_json:
            print(json.dumps([i.model_dump(mode="json") for i in infos]))
        else:
            render.sessions(Console(), infos)

    _run(body)


@app.command()
def show(session: str, as_json: Json = False) -> None:
    """Show a session: transitions in order, measurements, patches, decisions."""

    def body():
        s = Sessions()
        info, state = s.info(session), s.state(session)
        calls = s.store.tool_calls(session)
        if as_json:
            print(json.dumps(render.show_json(info, state, calls)))
        else:
            render.show(Console(), info, state, calls)

    _run(body)


from agent import (
    cli_analysis,  # noqa: F401  (registers analyze/diagnose/diff)
    cli_durable,  # noqa: F401  (registers replay/export/import/fork)
    cli_sglang,  # noqa: F401  (registers instrument/playbook)
)
