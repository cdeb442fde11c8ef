"""After SIGINT, SIGTERM or SIGHUP (`tools/interrupts.py`), or any exception that ends a session
(a bug, a library's or a tool's error): stop every server the session started
and remove its reference worktree, on the target's host and on its `[[hosts]]`; and, when a
session starts, name the servers recorded in this store that still run (those of a session
running now as its own, the others as left behind). "Every server" is what
the pid files name and every process marked as the session's in its environment (`server.
stop_marked`), so a server spawned as a SIGKILL fell, before any record of it, is stopped too; a
session that ends (`settled`) sweeps its host the same way.

The clean-up runs the tools directly (locally or through the host's executor), not through the
door: it is not a step of the loop, so a resumed session replays exactly as if it had been killed
there. The checkout keeps what the session had put in it (commits, instrumentation): `perfloop
resume` continues from the last checkpoint.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent.context import host_dir
from agent.decision.arms.arms import arms_in_use
from agent.decision.arms.interleave import beside_files, reference_dir
from state.door.calls import PathArgs, PidFileArgs
from state.engines.process import MarkedArgs, StoppedServers
from state.engines.workspace import RemoveCopyArgs
from state.sessions.loop import LoopState
from tools import server
from tools.door.live import Executor, ExecutorFor
from tools.door.registry import spec_of
from tools.errors import ToolError, one_line
from tools.hosts import info
from tools.hosts import local as local_host
from tools.interrupts import Interrupted
from tools.workspace import reference


def run_tool(executor: Executor | None, fn: Callable[[Any], BaseModel], args: BaseModel) -> BaseModel:
    """A tool run here, or on the host of `executor` when it is a host tool; not recorded."""
    spec = spec_of(fn)
    return executor.call(spec, args) if executor is not None and spec.where == "host" else fn(args)


def stop_servers(state: LoopState, executor: Executor | None, executors: ExecutorFor) -> list[str]:
    """Stop every server the session's pid files name (the candidate, the reference and a
    confirming pair on the target's host, each trial host's, the reference host's reference) and
    remove the reference copies;
    returns what could not be done, one line each (the rest is still tried)."""
    grace, problems = state.target.launch.stop_grace_s, []
    files = host_dir(state)
    jobs: list[tuple[str, Executor | None, Callable[[Any], BaseModel], BaseModel]] = [
        (
            "server",
            executor,
            server.stop_recorded,
            PidFileArgs(pid_file=files / "server.pid", repo=state.target.repo, grace_s=grace),
        ),
    ]
    for name, where in beside_files(state).items():
        args = PidFileArgs(pid_file=files / name, repo=where, grace_s=grace)
        jobs.append((name.removesuffix(".pid"), executor, server.stop_recorded, args))
    marked = MarkedArgs(folder=files, grace_s=grace)
    jobs.append(("servers marked as the session's", executor, server.stop_marked, marked))
    if arms_in_use(state) != "sequential":
        copy = RemoveCopyArgs(repo=state.target.repo, dest=reference_dir(state))
        jobs.append(("reference copy", executor, reference.remove_reference_copy, copy))
    for h in state.target.hosts:
        try:
            ex = executors(h.host)
            sub = Path("~/.perfloop/sessions") / state.session_id / "trials" / h.name
            path = state.options.session_dir / "trials" / h.name
            if ex is not None:
                path = PathArgs.model_validate(
                    run_tool(ex, info.expand_user, PathArgs(path=sub)).model_dump()
                ).path
        except Exception as exc:  # one host down does not keep the others' servers running
            problems.append(f"trial host {h.name}: {exc}")
            continue
        pid_file = PidFileArgs(pid_file=path / "server.pid", repo=h.repo, grace_s=grace)
        jobs.append((f"trial host {h.name}", ex, server.stop_recorded, pid_file))
        jobs.append((f"trial host {h.name}", ex, server.stop_marked, MarkedArgs(folder=path, grace_s=grace)))
        if h.name == state.target.decide.reference_host:  # cross-host arms' reference tree there
            there = path / "reference"
            ref = PidFileArgs(pid_file=path / "reference.pid", repo=there, grace_s=grace)
            jobs.append((f"reference host {h.name}", ex, server.stop_recorded, ref))
            gone = RemoveCopyArgs(repo=h.repo, dest=there)
            jobs.append((f"reference host {h.name}'s copy", ex, reference.remove_reference_copy, gone))
    for what, ex, fn, job in jobs:
        try:
            run_tool(ex, fn, job)
        except Exception as exc:
            problems.append(f"{what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return problems


NOTE = "perfloop_session_note"
"""The attribute an exception that ended a session carries what the session did about it in."""


def stopped_after(
    exc: BaseException, state: LoopState, executor: Executor | None, executors: ExecutorFor
) -> None:
    """Stop what the session started after `exc` ended it (a signal, a bug, a library's or a
    tool's exception) and note on `exc` what was done and how to resume, for the CLI's one line
    (`agent/cli/running.py`)."""
    problems = stop_servers(state, executor, executors)
    left = f" (not all: {'; '.join(problems)})" if problems else ""
    note = f"; servers stopped{left}; continue with `perfloop resume {state.session_id}`"
    if isinstance(exc, Interrupted):
        exc.note = note
    else:
        setattr(exc, NOTE, note)  # on any exception: its class is not ours


def settled(state: LoopState, paused: bool, executor: Executor | None, executors: ExecutorFor) -> None:
    """After the loop returned: a session that paused for approval stops its servers when told to
    (`LoopOptions.release_servers_when_paused`; approving relaunches them, as the steps after
    approval launch the server they need when it is not healthy, `agent/serving.py` start_server);
    one that ended leaves nothing of its own running on its host, a server no step knew of (spawned
    by an attempt killed before its pid file) included, and says so when there was one."""
    if paused:
        if state.options.release_servers_when_paused:
            problems = stop_servers(state, executor, executors)
            left = f"; not all: {'; '.join(problems)}" if problems else ""
            print(f"paused for approval: its servers are stopped while it waits{left}", file=sys.stderr)
        return
    try:
        pids = unrecorded(state, executor, keep=None)
    except (
        ToolError,
        OSError,
    ) as exc:  # e.g. a host where perfloop's tools cannot run yet: the session's own ending stands
        print(f"could not look for servers of this session no step knew of: {one_line(exc)}", file=sys.stderr)
        return
    if pids:
        print(f"stopped {len(pids)} process(es) of this session no step knew of: {pids}", file=sys.stderr)


def unrecorded(state: LoopState, executor: Executor | None, keep: str | None) -> list[int]:
    """Stop every server marked as the session's on its host but the one marked `keep`; their pids."""
    args = MarkedArgs(folder=host_dir(state), keep=keep, grace_s=state.target.launch.stop_grace_s)
    return StoppedServers.model_validate(run_tool(executor, server.stop_marked, args).model_dump()).pids


def running_servers(home: Path) -> list[tuple[str, int, int]]:
    """(session, pid, pgid) of each server a pid file under `home/sessions` names whose process
    group still runs on this machine (pid files older than the boot are not looked at)."""
    booted = _boot_time()
    found = []
    sessions = home / "sessions"
    for pid_file in sorted([*sessions.glob("*/*.pid"), *sessions.glob("*/trials/*/*.pid")]):
        try:
            if pid_file.stat().st_mtime < booted:
                continue
            record = json.loads(pid_file.read_text())
            pid, pgid = int(record["pid"]), int(record["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if local_host.group_members(pgid):
            found.append((pid_file.relative_to(sessions).parts[0], pid, pgid))
    return found


def running_lines(home: Path, running_now: Mapping[str, str] | None = None) -> list[str]:
    """The lines naming the servers recorded in this store that still run: one warning for those
    sessions no longer running left behind (killed, crashed, or ended), with the command that stops
    them; one line for each session running now (`running_now`: id -> holder, `SessionStore.held`),
    whose servers are its own."""
    found, now = running_servers(home), running_now or {}
    left = [(sid, pid, pgid) for sid, pid, pgid in found if sid not in now]
    lines = []
    if left:
        named = ", ".join(f"pid {pid} (session {sid})" for sid, pid, _ in left)
        groups = " ".join(f"-{pgid}" for pgid in dict.fromkeys(pgid for _, _, pgid in left))
        lines.append(
            f"warning: servers started by earlier sessions still run: {named}; stop them with `kill -- {groups}`"
        )
    for sid in dict.fromkeys(sid for sid, _, _ in found if sid in now):
        pids = ", ".join(f"pid {pid}" for s, pid, _ in found if s == sid)
        lines.append(f"session {sid} is running now ({now[sid]}); its servers are its own: {pids}")
    return lines


def _boot_time() -> float:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return time.time() - time.monotonic()
