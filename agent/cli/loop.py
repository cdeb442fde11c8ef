"""The loop's commands: demo, run, resume, approve, reject."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import (
    Approve,
    BaseUrl,
    Books,
    FloorFactor,
    FloorMs,
    HostPython,
    HostUrl,
    Iters,
    Json,
    LlmApprove,
    LlmSeconds,
    LlmSteps,
    LlmTokens,
    Method,
    ModelOpt,
    NoBuiltin,
    Parallel,
    ProposerOpt,
    TrustNew,
    choice,
    finish,
    run_command,
)
from agent.cli.ids import SessionArg
from agent.cli.preflight import check_gpu, check_setup
from agent.cli.target import DEMO_CONFIG, DEMO_SOURCE, load_target, with_host, with_proposer
from agent.sessions.approving import answer_session, edited_patch
from agent.sessions.holding import refuse_if_held
from agent.sessions.remote import remote_base
from agent.sessions.runner import Sessions, new_session_id
from playbooks.launch import with_flag, without_flag
from state.correctness import CorrectnessConfig
from tools.errors import ConfigError, ToolError

KeepServers = Annotated[
    bool,
    typer.Option(
        "--keep-servers-when-paused",
        help="Keep the servers running while the session waits for approval (quick interactive "
        "work); by default they are stopped and approving launches them again.",
    ),
]


def _options(
    approve: str,
    method: str,
    max_iterations: int,
    playbooks: list[Path],
    no_builtin: bool,
    floor: tuple[float | None, float] = (None, 2.0),
    keep_servers: bool = False,
) -> dict:
    choice("approve", approve, ("auto", "manual"))
    choice("profile-method", method, ("patch", "api"))
    return {
        "approve": approve,
        "max_iterations": max_iterations,
        "floor_ms": floor[0],
        "floor_factor": floor[1],
        "playbook_dirs": playbooks,
        "builtin_playbooks": not no_builtin,
        "python": sys.executable,
        "decision_rule": "ci-v1",
        "long_prompts": True,
        "power": True,
        "aa_evidence": True,
        "reference_host_aa": True,
        "launch_allowlist": True,
        "release_servers_when_paused": not keep_servers,
    }


def demo(
    device: Annotated[str, typer.Option(metavar="cpu|cuda", help="cpu or cuda.")] = "cpu",
    preset: Annotated[
        str,
        typer.Option(metavar="cpu|glm5", help="Demo server size: cpu, or glm5 (GLM-5 geometry, one H200)."),
    ] = "cpu",
    approve: Approve = "auto",
    profile_method: Method = "patch",
    max_iterations: Iters = 3,
    floor_ms: FloorMs = None,
    floor_factor: FloorFactor = 2.0,
    playbooks: Books = None,
    no_builtin_playbooks: NoBuiltin = False,
    host: HostUrl = None,
    trust_new_host: TrustNew = False,
    host_python: HostPython = None,
    proposer: ProposerOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrl = None,
    llm_max_steps: LlmSteps = None,
    llm_max_tokens: LlmTokens = None,
    llm_max_seconds: LlmSeconds = None,
    llm_approve: LlmApprove = None,
    server_args: Annotated[
        str,
        typer.Option(
            help="More launch flags for the demo server, e.g. --server-args=--disable-cuda-graph "
            "(eager decode on cuda), or '--cuda-graph-max-bs 4'."
        ),
    ] = "",
    keep_servers_when_paused: KeepServers = False,
    as_json: Json = False,
) -> None:
    """Copy the embedded MLA demo server into a workspace (on --host if given) and run the loop on it."""

    def body() -> None:
        choice("device", device, ("cpu", "cuda"))
        choice("preset", preset, ("cpu", "glm5"))
        floor = (floor_ms, floor_factor)
        opts = _options(
            approve, profile_method, max_iterations, playbooks or [], no_builtin_playbooks, floor,
            keep_servers_when_paused,
        )  # fmt: skip
        sessions = Sessions()
        sid = new_session_id()
        target = with_host(load_target(DEMO_CONFIG), host, trust_new_host, host_python)
        target = with_proposer(
            target,
            mode=proposer,
            model=model,
            base_url=base_url,
            max_steps=llm_max_steps,
            max_tokens=llm_max_tokens,
            max_seconds=llm_max_seconds,
            approve=llm_approve,
        )
        base = remote_base(target) if target.host.kind == "ssh" else sessions.home
        target = target.model_copy(update={"repo": base / "workspaces" / sid / "mla_server"})
        argv = with_flag(with_flag(target.launch.argv, "--device", device), "--preset", preset)
        if device == "cuda":  # one torch thread is for the CPU preset on a small shared CPU
            argv = without_flag(argv, "--threads")
        argv += shlex.split(server_args)
        launch = target.launch.model_copy(update={"argv": argv})
        correctness = target.correctness
        if device == "cuda":  # the demo target file turns them off for the CPU's slow prefills
            default = CorrectnessConfig.model_fields["long_prompts"].default
            correctness = correctness.model_copy(update={"long_prompts": default})
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
        state = sessions.start(target, {**opts, "demo_source": DEMO_SOURCE}, sid, None)
        finish(sessions, state, as_json)

    run_command(body)


def _tp_size(argv: list[str]) -> int:
    """The demo server's `--tp-size N` (`--tp-size=N`) in its launch flags, else 1: one trace per rank."""
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--tp-size" and i + 1 < len(argv) else arg.partition("=")[2]
        if arg == "--tp-size" or arg.startswith("--tp-size="):
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"--server-args: --tp-size needs a whole number >= 1, got {value!r}")
            return int(value)
    return 1


def run(
    target_toml: Annotated[Path, typer.Argument(metavar="TARGET.toml", help="Target config (TOML).")],
    approve: Approve = "auto",
    profile_method: Annotated[
        str | None, typer.Option("--profile-method", help="Override the config's profile method (patch|api).")
    ] = None,
    max_iterations: Iters = 3,
    parallel: Parallel = None,
    floor_ms: FloorMs = None,
    floor_factor: FloorFactor = 2.0,
    playbooks: Books = None,
    no_builtin_playbooks: NoBuiltin = False,
    host: HostUrl = None,
    trust_new_host: TrustNew = False,
    host_python: HostPython = None,
    proposer: ProposerOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrl = None,
    llm_max_steps: LlmSteps = None,
    llm_max_tokens: LlmTokens = None,
    llm_max_seconds: LlmSeconds = None,
    llm_approve: LlmApprove = None,
    keep_servers_when_paused: KeepServers = False,
    as_json: Json = False,
) -> None:
    """Run the loop on the target a TOML file describes."""

    def body() -> None:
        target = with_host(load_target(target_toml), host, trust_new_host, host_python)
        target = with_proposer(
            target,
            mode=proposer,
            model=model,
            base_url=base_url,
            max_steps=llm_max_steps,
            max_tokens=llm_max_tokens,
            max_seconds=llm_max_seconds,
            approve=llm_approve,
        )
        method = profile_method or target.profile.method
        floor = (floor_ms, floor_factor)
        opts = _options(
            approve, method, max_iterations, playbooks or [], no_builtin_playbooks, floor, keep_servers_when_paused
        )  # fmt: skip
        if parallel is not None and not target.hosts:
            raise ConfigError(
                f"--parallel {parallel} needs [[hosts]] in {target_toml}: list the hosts to try candidates on"
            )
        opts["parallel"] = parallel
        target = target.model_copy(update={"profile": target.profile.model_copy(update={"method": method})})
        check_setup(target, opts)
        sessions = Sessions()
        refuse_if_held(sessions.store, target, sessions.where())  # another session's checkout
        state = sessions.start(target, opts, new_session_id(), target_toml.resolve())
        finish(sessions, state, as_json)

    run_command(body)


def resume(session: SessionArg, as_json: Json = False) -> None:
    """Continue a session from its last checkpoint."""

    def body() -> None:
        sessions = Sessions()
        if sessions.pending_approval(session) is not None:
            raise ToolError(
                f"session {session} waits for approval: `perfloop approve {session}` "
                f"or `perfloop reject {session} --reason TEXT`"
            )
        finish(sessions, sessions.resume(session), as_json)

    run_command(body)


def _answer(session: str, answer: dict, as_json: bool, digest: str | None = None) -> None:
    sessions = Sessions()
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
) -> None:
    """Approve the patch a paused session proposes (or your edit of it), or the batch of candidates
    it would try at once on the target's [[hosts]], and continue the loop."""

    def body() -> None:
        answer: dict = {"approved": True, "by": "human"}
        if only:
            answer["playbooks"] = only
        if patch is not None:
            answer |= {"diff": edited_patch(session, patch), "reason": f"edited patch from {patch}"}
        _answer(session, answer, as_json, digest)

    run_command(body)


def reject(
    session: SessionArg, reason: Annotated[str, typer.Option(help="Why (recorded).")], as_json: Json = False
) -> None:
    """Reject the patch a paused session proposes, and continue the loop."""
    run_command(lambda: _answer(session, {"approved": False, "by": "human", "reason": reason}, as_json))


COMMANDS = {"demo": demo, "run": run, "resume": resume, "approve": approve, "reject": reject}
