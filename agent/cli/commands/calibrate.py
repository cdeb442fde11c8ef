"""`perfloop calibrate TARGET.toml [--launches N]`: measure launch-to-launch noise on purpose.

Before it starts it says what it will cost: its launches, and the time they should take, from the
earlier launches of this target on this host the store timed (else a guess, said as one). A signal
(Ctrl-C, SIGTERM, SIGHUP) or an error stops every server it started, whole process groups (a vLLM
server's EngineCore too), found by the mark in their environment, and says so in one line.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer

from agent.cli.options import HostPython, HostUrl, Json, TrustNew
from agent.cli.running import run_command

if TYPE_CHECKING:
    from agent.sessions.runner import Sessions
    from state.config.target import TargetConfig
    from state.measurement.decision import LaunchNoise
    from tools.door.live import Executor
    from tools.store.sessions import SessionStore

GUESS_S = 60.0
"""A launch's start and measurement when this host timed none of the target's yet: a guess, said as
one (a small model's vLLM launch took 52-64 s on one H100)."""
EARLIER = 5
"""Earlier sessions of the target on the host whose launches are read for the expected time."""


def launch_count(arms: str, launches: int) -> tuple[int, int]:
    """(server launches, with arms = auto resolved to interleaved: launches): pairs cost two."""
    if arms == "interleaved":
        return 2 * launches, 2 * launches
    return launches, 2 * launches if arms == "auto" else launches


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


def span(seconds: float) -> str:
    """`48 s`, `2 min 05 s`, `12 min` (pure)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{seconds / 60:.0f} min" if seconds >= 600 or not rest else f"{minutes} min {rest:02d} s"


class Timed(NamedTuple):
    """What this host timed of the target before (seconds), read from its earlier sessions."""

    per_launch: list[float]
    """Each earlier calibration's wall time over its launches."""
    starts: list[float]
    """Every timed start (`server.launch`), sessions' too."""
    stops: list[float]
    """Every timed stop (`server.stop`)."""
    per_request: list[float]
    """Each measurement of the unchanged tree (a baseline's, a calibration's) per request it sent."""


def expected(counts: tuple[int, int], t: Timed, requests: int, timeout_s: float) -> tuple[str, float | None]:
    """The time `counts` launches should take (pure), and its seconds (None where it is a floor):
    at the median seconds a launch took in earlier calibrations of this target on this host, else
    at its parts' medians there (`t`: a start, `requests` requests of the unchanged tree, a stop;
    any session's), else at least the starts (no seconds), else at `GUESS_S`, said as a guess; with the bound
    every start's timeout gives."""
    low, high = counts
    both = lambda each: span(low * each) + (f" ({span(high * each)} if interleaved)" if high != low else "")
    bound = f"; at most {span(high * timeout_s)} if every start took its {timeout_s:.0f} s"
    med = statistics.median
    if t.per_launch:
        each = med(t.per_launch)
        return (
            f"expected: about {both(each)}, {each:.0f} s a launch (start and measurement), the median "
            f"of {len(t.per_launch)} earlier calibration(s) of this target on this host{bound}"
        ), low * each
    if t.starts and t.per_request:
        start, stop, req = med(t.starts), med(t.stops) if t.stops else 0.0, med(t.per_request)
        each = start + requests * req + stop
        return (
            f"expected: about {both(each)}, {each:.0f} s a launch: a start {start:.0f} s, {requests} "
            f"requests at {req:.2f} s, a stop {stop:.0f} s (the medians of {len(t.starts)} earlier "
            f"launch(es) of this target on this host){bound}"
        ), low * each
    if t.starts:
        each = med(t.starts)
        return (
            f"expected: at least {both(each)}, {each:.0f} s a start (the median of {len(t.starts)} "
            f"earlier start(s) of this target on this host) plus each launch's measurement{bound}"
        ), None
    return (
        f"expected: about {both(GUESS_S)} at a guessed {GUESS_S:.0f} s a launch (no launch of this "
        f"target timed on this host yet){bound}"
    ), low * GUESS_S


UNCHANGED = ("baseline", "calibrate")
"""Nodes whose measurements are of the tree as found (what `calibrate` measures)."""


def timed(store: SessionStore, key: str) -> Timed:
    """What the sessions the target's kept A/A launches came from (the newest `EARLIER`) timed on
    the host `key` names."""
    sids = list(dict.fromkeys(s.session_id for s in reversed(store.aa_samples(key))))[:EARLIER]
    t = Timed([], [], [], [])
    for sid in sids:
        calls = [c for c in store.tool_calls(sid) if c.error is None]
        launched = [c.duration_s for c in calls if c.name == "server.launch"]
        t.starts.extend(launched)
        t.stops.extend(c.duration_s for c in calls if c.name == "server.stop")
        for c in calls:
            if c.name == "bench.measure" and c.node in UNCHANGED and isinstance(c.output, dict):
                sent = len((c.output.get("measurement") or {}).get("requests") or [])
                warm = (c.input.get("config") or {}).get("warmup_requests") or 0
                if sent:
                    t.per_request.append(c.duration_s / (sent + warm))
        if sid.startswith("calibrate-") and launched and calls:
            end = max(c.started_at.timestamp() + c.duration_s for c in calls)
            t.per_launch.append((end - calls[0].started_at.timestamp()) / len(launched))
    return t


def stopped_line(exc: BaseException, executor: Executor | None, folder: Path, grace_s: float) -> None:
    """Stop every server process calibrate started on its host (each marked as launched for a pid
    file under `folder`: their whole process groups) and note on `exc` what was stopped, for the
    one line the command ends with (agent/cli/running.py)."""
    from agent.sessions.interrupts import NOTE, run_tool
    from state.engines.process import MarkedArgs, StoppedServers
    from tools import server
    from tools.errors import one_line
    from tools.interrupts import Interrupted

    try:
        out = run_tool(executor, server.stop_marked, MarkedArgs(folder=folder, grace_s=grace_s))
        pids = StoppedServers.model_validate(out.model_dump()).pids
        note = (
            f"; stopped every server it started, whole process groups (pids {', '.join(map(str, pids))} "
            "and their children), none left running"
            if pids
            else "; no server of it was running"
        )
    except Exception as bad:  # e.g. the SSH host unreachable: say so, the signal's line still ends it
        note = f"; could not stop the servers it started ({one_line(bad)}): look for them under {folder}"
    note += "; nothing was changed, the launches measured so far are kept"
    if isinstance(exc, Interrupted):
        exc.note = note
    else:
        setattr(exc, NOTE, getattr(exc, NOTE, "") + note)


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
        from agent.cli.target import load_target, with_host

        target = with_host(load_target(target_toml), host, trust_new_host, host_python)
        from agent.cli.preflight import check_placeholders, check_port_argv, check_repo  # git: once good

        check_placeholders(target)
        check_port_argv(target)
        check_repo(target)
        import shlex

        from agent.cli.output import console
        from agent.cli.terminal import perfloop
        from agent.decision.stats.noise import target_key
        from agent.sessions.runner import Sessions, new_session_id

        sessions = Sessions()
        out = console(as_json)
        out.print(plan(target.decide.arms, launches, target.launch.startup_timeout_s), highlight=False)
        counts = launch_count(target.decide.arms, launches)
        m = target.measure
        requests = (
            len(m.prompts) * m.repeats * (1 if target.decide.arms == "interleaved" else target.decide.looks)
        )
        line, seconds = expected(
            counts, timed(sessions.store, target_key(target)), requests + m.warmup_requests,
            target.launch.startup_timeout_s,
        )  # fmt: skip
        out.print(line, highlight=False, soft_wrap=True)
        began = time.monotonic()
        noise = measure(sessions, target, f"calibrate-{new_session_id()}", launches, as_json)
        took = time.monotonic() - began
        said = f" (expected {span(seconds)})" if seconds is not None else ""
        out.print(f"calibrate took {span(took)}{said}", highlight=False)
        use = (
            "its sessions use this noise"
            if noise.source != "default"
            else "its sessions start at the default noise"
        )
        me = perfloop()  # the perfloop that runs, where `perfloop` is not on $PATH
        out.print(f"next: {me} run {shlex.quote(str(target_toml))} ({use})", highlight=False)

    def caught() -> None:  # a signal from the start: a Ctrl-C while it reads the store is one line too
        from tools import interrupts

        with interrupts.catching():
            body()

    run_command(caught)


def measure(sessions: Sessions, target: TargetConfig, sid: str, launches: int, as_json: bool) -> LaunchNoise:
    """Run the calibration under session id `sid` (signals caught by the caller: any ending stops
    the servers it started); print its noise and what it publishes (with `--json`, one document)."""
    from agent.cli.output import console, emit
    from agent.decision.calibration.calibrate import calibrate as run_calibration
    from agent.decision.calibration.published import published
    from agent.decision.stats.noise import target_key
    from agent.sessions.remote import close_hosts, executor_for, host_executors, remote_options
    from tools.door.live import LiveDoor

    out = console(as_json)
    local_dir = sessions.session_dir(sid)
    opts = remote_options(target, sid)
    folder = opts.get("host_dir") or local_dir
    with executor_for(target, local_dir) as remote:  # signals caught by the command (`caught`)
        door = LiveDoor(sid, sessions.store, remote, host_executors(local_dir))  # [[hosts]]: host.kind
        try:
            noise, arms = run_calibration(
                door,
                target,
                sid,
                folder,
                opts.get("python") or sys.executable,
                launches,
                lambda line: out.print(line, highlight=False),
            )
        except BaseException as exc:  # a signal (Interrupted), an error, a bug: no server left
            stopped_line(exc, remote, folder, target.launch.stop_grace_s)
            raise
        finally:
            close_hosts()
    out.print(f"{target.name}: {noise.describe()} (for {arms} arms)", highlight=False)
    shown = published(sessions.store.aa_samples(target_key(target)), noise, target.decide, arms)
    out.print(shown.line(), highlight=False)
    if as_json:
        emit({"calibration": sid, "arms": arms, **noise.model_dump(mode="json"), **shown.as_json()})
    return noise


COMMANDS = {"calibrate": calibrate}
