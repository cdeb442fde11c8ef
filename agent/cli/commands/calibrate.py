"""`perfloop calibrate TARGET.toml [--launches N]`: measure launch-to-launch noise on purpose."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import HostPython, HostUrl, Json, TrustNew, run_command
from agent.cli.output import console, emit
from agent.cli.preflight import check_port_argv, check_repo
from agent.cli.target import load_target, with_host
from agent.decision.calibration.calibrate import calibrate as run_calibration
from agent.decision.calibration.published import published
from agent.decision.stats.noise import target_key
from agent.sessions.remote import close_hosts, executor_for, host_executors, remote_options
from agent.sessions.runner import Sessions, new_session_id
from tools.door.live import LiveDoor


def plan(arms: str, launches: int, startup_timeout_s: float) -> str:
    """What `calibrate` will cost, said before it starts (pure): with interleaved arms each sample
    is a pair of launches side by side, so `--launches N` launches the server 2N times."""
    if arms == "interleaved":
        count = f"{2 * launches} server launches ({launches} A/A pairs side by side: interleaved arms)"
    elif arms == "auto":
        count = (
            f"{launches} server launches, or {2 * launches} ({launches} A/A pairs side by side) "
            "if arms = auto resolves to interleaved"
        )
    else:
        count = f"{launches} server launches, one after another ({arms} arms)"
    return (
        f"calibrate: {count}, each a start of the unchanged tree (up to {startup_timeout_s:.0f} s) "
        "and one measurement; nothing is changed"
    )


def calibrate(
    target_toml: Annotated[Path, typer.Argument(metavar="TARGET.toml", help="Target config (TOML).")],
    launches: Annotated[
        int, typer.Option(min=2, help="Launches of the same tree (with interleaved arms: pairs of launches).")
    ] = 6,
    host: HostUrl = None,
    trust_new_host: TrustNew = False,
    host_python: HostPython = None,
    as_json: Json = False,
) -> None:
    """Launch the target's current tree N times (N pairs with interleaved arms), each an A/A sample;
    `arms = "auto"` resolved as a session does, and said."""

    def body() -> None:
        target = with_host(load_target(target_toml), host, trust_new_host, host_python)
        check_port_argv(target)
        check_repo(target)
        sessions = Sessions()
        sid = f"calibrate-{new_session_id()}"
        local_dir = sessions.session_dir(sid)
        opts = remote_options(target, sid)
        out = console(as_json)
        out.print(plan(target.decide.arms, launches, target.launch.startup_timeout_s), highlight=False)
        with executor_for(target, local_dir) as remote:
            door = LiveDoor(sid, sessions.store, remote, host_executors(local_dir))  # [[hosts]]: host.kind
            try:
                noise, arms = run_calibration(
                    door,
                    target,
                    sid,
                    opts.get("host_dir") or local_dir,
                    opts.get("python") or sys.executable,
                    launches,
                    lambda line: out.print(line, highlight=False),
                )
            finally:
                close_hosts()
        out.print(f"{target.name}: {noise.describe()} (for {arms} arms)", highlight=False)
        shown = published(sessions.store.aa_samples(target_key(target)), noise, target.decide, arms)
        out.print(shown.line(), highlight=False)
        out.print(f"next: perfloop run {target_toml} (its sessions use this noise)", highlight=False)
        if as_json:
            emit({"calibration": sid, "arms": arms, **noise.model_dump(mode="json"), **shown.as_json()})

    run_command(body)


COMMANDS = {"calibrate": calibrate}
