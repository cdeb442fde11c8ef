"""The loop's commands: demo, run, resume, approve, reject."""

from __future__ import annotations

import os
import shlex
import socket
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agent.cli.asking import default_approve
from agent.cli.commands.calibrate import span
from agent.cli.commands.flags import LoopFlags, loop_flags
from agent.cli.ids import SessionArg
from agent.cli.options import Json, Method, Parallel, Trust
from agent.cli.running import choice, err, run_command
from tools.errors import ConfigError, ToolError

if TYPE_CHECKING:  # the loop (LangGraph, the store, the state) loads inside the commands that run it
    from agent.sessions.runner import Sessions
    from state.config.target import TargetConfig
    from tools.store.sessions import SessionStore


def demo(
    device: Annotated[str, typer.Option(metavar="cpu|cuda", help="cpu or cuda.")] = "cpu",
    preset: Annotated[
        str,
        typer.Option(metavar="cpu|glm5", help="Demo server size: cpu, or glm5 (GLM-5 geometry, one H200)."),
    ] = "cpu",
    profile_method: Method = "patch",
    server_args: Annotated[
        str,
        typer.Option(
            help="More launch flags for the demo server, e.g. --server-args=--disable-cuda-graph "
            "(eager decode on cuda), or '--cuda-graph-max-bs 4'."
        ),
    ] = "",
    *,
    flags: LoopFlags,
) -> None:
    """Copy the embedded MLA demo server into a workspace (on --host if given) and run the loop on it."""

    def body() -> None:
        from agent.cli.common import finish
        from agent.cli.preflight import check_gpu, check_setup
        from agent.cli.target import DEMO_CONFIG, DEMO_SOURCE, load_target
        from agent.sessions.remote import remote_base
        from agent.sessions.runner import Sessions, new_session_id
        from playbooks.launch import with_flag, without_flag
        from state.measurement.correctness import CorrectnessConfig

        choice("device", device, ("cpu", "cuda"))
        choice("preset", preset, ("cpu", "glm5"))
        opts = flags.options(profile_method)
        opts["give_back_checkout"] = False  # perfloop's own copy: it shows the fix on its branch
        sessions = Sessions()
        sid = new_session_id()
        target = flags.target(load_target(DEMO_CONFIG))
        base = remote_base(target) if target.host.kind == "ssh" else sessions.home
        target = target.model_copy(update={"repo": base / "workspaces" / sid / "mla_server"})
        argv = with_flag(with_flag(target.launch.argv, "--device", device), "--preset", preset)
        if device == "cuda":  # one torch thread is for the CPU preset on a small shared CPU
            argv = without_flag(argv, "--threads")
        argv += shlex.split(server_args)
        launch = target.launch.model_copy(update={"argv": argv})
        correctness = target.correctness
        if device == "cuda":  # the demo target file turns them off for the CPU's slow prefills; on a GPU
            default = CorrectnessConfig.model_fields["long_prompts"].default  # the schedule moves the math
            correctness = correctness.model_copy(update={"long_prompts": default, "policy": "numerics"})
        target = target.model_copy(
            update={
                "launch": launch,
                "profile": target.profile.model_copy(update={"method": profile_method}),
                "tp_size": _tp_size(argv),
                "correctness": correctness,
            }
        )
        check_setup(target, opts, repo_exists=False)  # the demo makes its repo
        if device == "cuda" and target.host.kind == "local":
            check_gpu()
        said, seconds = demo_expected(sessions.store, target.name, argv, preset)
        err.print(said, highlight=False, soft_wrap=True)
        began = time.monotonic()
        state = sessions.start(target, {**opts, "demo_source": DEMO_SOURCE}, sid, None)
        local = target.host.kind == "local"  # an SSH host's copy stays there (the session names it)
        finish(sessions, state, flags.as_json, workspace=target.repo.parent if local else None)
        err.print(
            f"the demo took {span(time.monotonic() - began)} (expected {span(seconds)})", highlight=False
        )

    run_command(body)


demo = loop_flags(demo)


DEMO_GUESS_S = {"cpu": 300.0, "glm5": 240.0}
"""A demo's wall time when this host ran none with the same flags yet: a guess, said as one (the CPU
preset took 179-318 s on a shared 2-core machine at load 0-8; the glm5 preset ~4 min on one H200)."""


def demo_expected(store: SessionStore, name: str, argv: list[str], preset: str) -> tuple[str, float]:
    """What `perfloop demo` says before it starts (a line, its seconds): the median wall time of the
    newest five demos this host ran to the end with the same launch flags and no approval asked,
    from their records (start to last call); else `DEMO_GUESS_S`, said as a guess."""
    host, took = socket.gethostname(), []
    for info in reversed(store.list_sessions()):
        s = info.summary
        if info.target_name != name or info.host != host or info.status != "done" or s is None:
            continue
        if s.launch_argv != argv or store.inputs(info.id, "answer"):
            continue
        if calls := store.tool_calls(info.id):
            end = max(c.started_at.timestamp() + c.duration_s for c in calls)
            took.append(end - info.created_at.timestamp())
        if len(took) == 5:
            break
    if took:
        each = statistics.median(took)
        return f"expected: about {span(each)}, the median of {len(took)} earlier demo(s) on this host", each
    guess = DEMO_GUESS_S.get(preset, DEMO_GUESS_S["cpu"])
    return f"expected: about {span(guess)} (a guess: no demo with these flags timed on this host yet)", guess


def _tp_size(argv: list[str]) -> int:
    """The demo server's `--tp-size N` (`--tp-size=N`) in its launch flags, else 1: one trace per rank."""
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--tp-size" and i + 1 < len(argv) else arg.partition("=")[2]
        if arg == "--tp-size" or arg.startswith("--tp-size="):
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"--server-args: --tp-size needs a whole number >= 1, got {value!r}")
            return int(value)
    return 1


def session_plan(target: TargetConfig, max_iterations: int) -> str:
    """What a session will cost, said before it starts (pure): its launches per candidate and why
    it may launch again (a reference beside the candidate; a confirming pair), its looks, its rounds."""
    d = target.decide
    beside = d.arms in ("interleaved", "auto")
    per = "1 launch" + (" (+1: the unchanged tree beside it, interleaved arms)" if beside else "")
    confirm = (
        f"; an acceptance whose interval starts below {d.confirm_below:g}x is confirmed on a second pair"
        if beside and d.confirm_below
        else ""
    )
    budget = (
        f"; [search] at most {target.search.max_launches} launches"
        if target.search and target.search.max_launches
        else ""
    )
    return (
        f"plan: the baseline's launch, then up to {max_iterations} round(s); each candidate costs {per} "
        f"and up to {d.looks} look(s) of measurement{confirm}{budget}; a launch may take up to "
        f"{target.launch.startup_timeout_s:.0f} s"
    )


def run(
    target_toml: Annotated[Path, typer.Argument(metavar="TARGET.toml", help="Target config (TOML).")],
    profile_method: Annotated[
        str | None, typer.Option("--profile-method", help="Override the config's profile method (patch|api).")
    ] = None,
    parallel: Parallel = None,
    *,
    flags: LoopFlags,
) -> None:
    """Run the loop on the target a TOML file describes."""

    def body() -> None:
        from agent.cli.target import load_target

        target = flags.target(load_target(target_toml))
        from agent.cli.preflight import check_setup  # git: once the file is known good

        method = profile_method or target.profile.method
        opts = flags.options(method, default_approve(flags.approve))  # your target: manual
        if parallel is not None and not target.hosts:
            raise ConfigError(
                f"--parallel {parallel} needs [[hosts]] in {target_toml}: list the hosts to try candidates on"
            )
        opts["parallel"] = parallel
        target = target.model_copy(update={"profile": target.profile.model_copy(update={"method": method})})
        check_setup(target, opts)
        from agent.cli.common import finish  # the loop loads once the target file is known good
        from agent.cli.targetcheck import DUMMY_WARNING, dummy_weights
        from agent.cli.terminal import styled
        from agent.sessions.holding import refuse_if_held
        from agent.sessions.runner import Sessions, new_session_id

        sessions = Sessions()
        refuse_if_held(sessions.store, target, sessions.where())  # another session's checkout
        if os.environ.get("PERFLOOP_PROGRESS") != "off":  # said before it starts, kept on screen
            err.print(session_plan(target, opts["max_iterations"]), highlight=False, soft_wrap=True)
        if dummy_weights(target.launch.argv):  # before any change is judged, whatever the progress
            err.print(styled((DUMMY_WARNING, "bold yellow")), highlight=False, soft_wrap=True)
        state = sessions.start(target, opts, new_session_id(), target_toml.resolve())
        finish(sessions, state, flags.as_json)

    run_command(body)


run = loop_flags(run)


def trusting(trust: str | None) -> Sessions:
    """The sessions, with `--trust DIGEST` for a session this user's key did not sign."""
    from agent.sessions.runner import Sessions

    sessions = Sessions()
    sessions.trust = trust
    return sessions


def resume(session: SessionArg, as_json: Json = False, trust: Trust = None) -> None:
    """Continue a session from its last checkpoint."""

    def body() -> None:
        from agent.cli.common import finish

        sessions = trusting(trust)
        sessions.verify(session)  # first: nothing of an unsigned session is acted on
        if sessions.pending_approval(session) is not None:
            from agent.cli.terminal import perfloop

            me = perfloop()
            raise ToolError(
                f"session {session} waits for approval: `{me} approve {session}` "
                f"or `{me} reject {session} --reason TEXT`"
            )
        finish(sessions, sessions.resume(session), as_json)

    run_command(body)


def _answer(session: str, answer: dict, as_json: bool, digest: str | None, trust: str | None) -> None:
    from agent.cli.common import finish
    from agent.sessions.approving import answer_session, edited_patch

    sessions = trusting(trust)
    sessions.verify(session)  # before anything reads or runs what it names (an edited patch's check)
    if answer.get("diff") is not None:
        answer["diff"] = edited_patch(session, answer["diff"])
    finish(sessions, answer_session(sessions, session, answer, digest), as_json)


def approve(
    session: SessionArg,
    patch: Annotated[
        Path | None,
        typer.Option(help="Apply this edited patch instead of the proposed one (validated first)."),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only", help="For a batch of candidates for [[hosts]]: try only this one (repeatable)."
        ),
    ] = None,
    digest: Annotated[
        str | None,
        typer.Option(
            help="The digest the approval view showed: refused if the stored session changed since."
        ),
    ] = None,
    as_json: Json = False,
    trust: Trust = None,
) -> None:
    """Approve the patch a paused session proposes (or your edit of it), or the batch of candidates
    it would try at once on the target's [[hosts]], and continue the loop."""

    def body() -> None:
        answer: dict = {"approved": True, "by": "human"}
        if only:
            answer["playbooks"] = only
        if patch is not None:
            answer |= {"diff": patch, "reason": f"edited patch from {patch}"}  # read once verified
        _answer(session, answer, as_json, digest, trust)

    run_command(body)


def reject(
    session: SessionArg,
    reason: Annotated[str, typer.Option(help="Why (recorded).")],
    as_json: Json = False,
    trust: Trust = None,
) -> None:
    """Reject the patch a paused session proposes, and continue the loop."""
    answer = {"approved": False, "by": "human", "reason": reason}
    run_command(lambda: _answer(session, answer, as_json, None, trust))


COMMANDS = {"demo": demo, "run": run, "resume": resume, "approve": approve, "reject": reject}
