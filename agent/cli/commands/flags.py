"""The options `demo` and `run` share, declared once: `@loop_flags` adds them to a command's
signature (what Typer reads for its options and help) and hands the command one `LoopFlags`."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent.cli.options import (
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
    ModelOpt,
    NoBuiltin,
    ProposerOpt,
    TrustNew,
)
from agent.cli.running import choice

if TYPE_CHECKING:  # the target's model loads when a command reads its target file, not at start-up
    from state.config.target import TargetConfig

KeepServers = Annotated[
    bool,
    typer.Option(
        "--keep-servers-when-paused",
        help="Keep the servers running while the session waits for approval (quick interactive "
        "work); by default they are stopped and approving launches them again.",
    ),
]

SHARED: tuple[tuple[str, Any, Any], ...] = (
    ("approve", Approve, None),
    ("max_iterations", Iters, 3),
    ("floor_ms", FloorMs, None),
    ("floor_factor", FloorFactor, 2.0),
    ("playbooks", Books, None),
    ("no_builtin_playbooks", NoBuiltin, False),
    ("host", HostUrl, None),
    ("trust_new_host", TrustNew, False),
    ("host_python", HostPython, None),
    ("proposer", ProposerOpt, None),
    ("model", ModelOpt, None),
    ("base_url", BaseUrl, None),
    ("llm_max_steps", LlmSteps, None),
    ("llm_max_tokens", LlmTokens, None),
    ("llm_max_seconds", LlmSeconds, None),
    ("llm_approve", LlmApprove, None),
    ("keep_servers_when_paused", KeepServers, False),
    ("as_json", Json, False),
)
"""(name, annotated type, default) of each shared option, in the order help lists them (last)."""


@dataclass(frozen=True)
class LoopFlags:
    """The shared options as one command received them."""

    approve: str | None
    """None: the command's default (`demo`: auto; `run`: manual, asked in place on a terminal)."""
    max_iterations: int
    floor_ms: float | None
    floor_factor: float
    playbooks: list[Path] | None
    no_builtin_playbooks: bool
    host: str | None
    trust_new_host: bool
    host_python: str | None
    proposer: str | None
    model: str | None
    base_url: str | None
    llm_max_steps: int | None
    llm_max_tokens: int | None
    llm_max_seconds: float | None
    llm_approve: str | None
    keep_servers_when_paused: bool
    as_json: bool

    def target(self, target: TargetConfig) -> TargetConfig:
        """`target` with `--host` and the proposer options applied."""
        from agent.cli.target import with_host, with_proposer

        target = with_host(target, self.host, self.trust_new_host, self.host_python)
        return with_proposer(
            target,
            mode=self.proposer,
            model=self.model,
            base_url=self.base_url,
            max_steps=self.llm_max_steps,
            max_tokens=self.llm_max_tokens,
            max_seconds=self.llm_max_seconds,
            approve=self.llm_approve,
        )

    def options(self, method: str, approve: str = "auto") -> dict:
        """A new session's `LoopOptions` values (every flag new sessions carry set); `approve` where
        the command line gave none."""
        return options(
            self.approve or approve,
            method,
            self.max_iterations,
            self.playbooks or [],
            self.no_builtin_playbooks,
            (self.floor_ms, self.floor_factor),
            self.keep_servers_when_paused,
        )


def options(
    approve: str,
    method: str,
    max_iterations: int,
    playbooks: list[Path],
    no_builtin: bool,
    floor: tuple[float | None, float] = (None, 2.0),
    keep_servers: bool = False,
) -> dict:
    """A new session's `LoopOptions` values (also `eval proposer`'s sessions)."""
    from playbooks.engine import carried_files  # the catalog's imports only where a session starts

    choice("approve", approve, ("auto", "manual"))
    choice("profile-method", method, ("patch", "api"))
    return {
        "approve": approve,
        "max_iterations": max_iterations,
        "floor_ms": floor[0],
        "floor_factor": floor[1],
        "playbook_dirs": playbooks,
        "playbook_files": carried_files(playbooks),
        "builtin_playbooks": not no_builtin,
        "python": sys.executable,
        "decision_rule": "ci-v1",
        "long_prompts": True,
        "power": True,
        "aa_evidence": True,
        "short_aa_pairs": True,
        "schedule_gate": True,
        "confirm_alone": True,
        "search_without_math": True,
        "output_noise_store": True,
        "first_verdict": True,
        "search_grid": True,
        "paired_blocks": True,
        "reference_host_aa": True,
        "launch_allowlist": True,
        "release_servers_when_paused": not keep_servers,
        "mechanism_ms": True,
        "mechanism_range": True,
        "give_back_checkout": True,
        "launches_past_cuts": True,
        "numerics_math_distance": True,
        "precise_small": True,
        "search_worst_trial": True,
        "search_block_measured": True,
        "numerics_unit_floor": True,
    }


def loop_flags(fn: Callable[..., None]) -> Callable[..., None]:
    """`fn(..., flags: LoopFlags)` as a command taking the shared options after its own."""
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "flags"]
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    shared = [inspect.Parameter(name, kind, default=default, annotation=tp) for name, tp, default in SHARED]

    @functools.wraps(fn)
    def command(**given: Any) -> None:
        flags = LoopFlags(**{name: given.pop(name) for name, _, _ in SHARED})
        fn(**given, flags=flags)

    command.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in [*own, *shared]}
    return command
