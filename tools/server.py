"""Target server control: launch and wait for health, check, stop by process group.

No server runs that a later perfloop cannot find: before the spawn, the pid file records the
intent (the launch's mark); every server gets the mark in its environment (`PERFLOOP_SERVER =
<pid file>#<launch number>`, inherited by each process it starts), and stopping a pid file's
server, or a whole session's (`stop_marked`), also stops every process marked for it, found in
/proc of the host the tool runs on, however a SIGKILL of perfloop fell (docs/FAULTS.md).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from state.door.calls import LaunchArgs, PidFileArgs, ServerArgs, ServerStatus
from state.engines.process import MarkedArgs, ProcessHandle, ServerHandle, StoppedServers
from tools import interrupts, secrets
from tools.door import tool
from tools.door.faults import fault_point
from tools.errors import ServerError
from tools.hosts import local as host
from tools.hosts.listeners import holders, owned_by
from tools.http import free_port, get_status, post_json
from tools.progress import report


def build_argv(argv: list[str], port: int, python: str) -> list[str]:
    """Substitute `{port}` and `{python}` in a launch command or env values (pure)."""
    return [a.replace("{port}", str(port)).replace("{python}", python) for a in argv]


def _last_line(text: str) -> str:
    """The last non-empty line of a server's log, as it may be shown (`secrets.outside`)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return secrets.outside(lines[-1]) if lines else "(empty log)"


def mark_of(pid_file: Path | None, log_path: Path, launch_number: int) -> str:
    """The value of `host.MARK_ENV` in a launch's environment: `<pid file>#<launch number>` (the
    log's path without a pid file), under the session's folder on its host (pure)."""
    return f"{pid_file or log_path}#{launch_number}"


def _record(pid_file: Path | None, record: dict) -> None:
    """Replace the pid file at once (a SIGKILL leaves the page cache, and so the file, whole; a
    power cut leaves no server to find)."""
    if pid_file is not None:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        host.write_file_atomic(pid_file, json.dumps(record))


def _port_line(text: str, port: int) -> str:
    """The log's line naming the address the server listens on, when it is not `port` (pure)."""
    for line in text.splitlines():
        ports = re.findall(r"(?:https?://[^\s:/]+:|\bport[ =:]+)(\d{2,5})\b", line, flags=re.IGNORECASE)
        if ports and str(port) not in ports:
            return f'; its log names another port: "{line.strip()[:160]}"'
    return ""


def passed_env(names: list[str]) -> dict[str, str]:
    """Values of `launch.pass_env` from perfloop's own environment (read now, never stored; each
    registered as a secret, so it is masked in whatever perfloop writes from now on)."""
    missing = [n for n in names if n not in os.environ]
    if missing:
        raise ServerError(
            f"launch.pass_env names {', '.join(missing)} but perfloop's environment does "
            "not set it; export it before running perfloop"
        )
    for name in names:
        secrets.register(os.environ[name])
    return {n: os.environ[n] for n in names}


def stop_pid_file(pid_file: Path | None, cwd: Path, grace_s: float) -> bool:
    """Stop the server a pid file records, and every process marked as launched for it; True if
    one was stopped.

    A killed perfloop may have started a server that never reached the checkpoint: the pid file,
    written right after the spawn, and the mark in the server's environment, set before it, are how
    the next attempt finds and stops it (no orphans). A recorded pgid counts only while its first
    member runs in `cwd` (its pid may be another's since); the mark holds whatever the cwd became
    (a reference copy made again is another folder).
    """
    if pid_file is None:
        return False
    try:
        pgid = json.loads(pid_file.read_text()).get("pgid")
    except (OSError, ValueError, AttributeError):
        pgid = None
    members = host.group_members(pgid) if isinstance(pgid, int) else []
    try:
        same_place = bool(members) and Path(os.readlink(f"/proc/{members[0]}/cwd")) == cwd.resolve()
    except OSError:
        same_place = False
    if same_place and isinstance(pgid, int):
        host.stop_group(pgid, grace_s)
    swept = host.stop_marked(lambda mark: mark.startswith(f"{pid_file}#"), grace_s)
    pid_file.unlink(missing_ok=True)
    return same_place or bool(swept)


def _given_up(args: LaunchArgs, proc: ProcessHandle) -> None:
    """Stop a launch that failed: its process group, whatever else carries its mark, its record."""
    host.stop_group(proc.pgid, args.launch.stop_grace_s)
    mark = mark_of(args.pid_file, args.log_path, args.launch_number)
    host.stop_marked(lambda m: m == mark, args.launch.stop_grace_s)
    if args.pid_file is not None:
        args.pid_file.unlink(missing_ok=True)


def _check_listener(args: LaunchArgs, port: int, proc: ProcessHandle) -> None:
    """The health answer must come from the server perfloop started: the port's listening socket
    belongs to its process group. Otherwise (e.g. another server already holds the port) our
    server is stopped and the launch fails with who holds it."""
    pgid = proc.pgid
    if not args.launch.check_listener or owned_by(port, host.group_members(pgid)) is not False:
        return
    others = [p for p in holders(port) if p not in host.group_members(pgid)]
    _given_up(args, proc)
    who = f"process {', '.join(map(str, others))}" if others else "another process"
    raise ServerError(
        f"port {port} answers {args.launch.health_path} but is held by {who}, not by the server "
        "perfloop started (stopped); free the port or set launch.port = 0"
    )


LISTEN_GRACE_S = 15.0
"""Seconds a server may refuse connections after its log said it listens (`launch.started_log`)
before the launch counts as one that never listens and is retried on a fresh port."""
PORT_TAKEN = re.compile(r"address already in use", re.IGNORECASE)  # EADDRINUSE, as Python words it


class _FreshPort(ServerError):
    """Worth a launch on a fresh port: the log said it listens while the port refused connections
    for LISTEN_GRACE_S, or it exited saying its port is in use (bound since `free_port` chose it)."""


def _completes(base_url: str) -> bool:
    """Whether a one-token greedy completion (no model named: the server's own) answers 200."""
    body = {"prompt": "Ready?", "max_tokens": 1, "temperature": 0.0}
    try:
        return post_json(base_url + "/v1/completions", body, timeout_s=60.0)[0] == 200
    except OSError:
        return False


@tool("server.launch")
def launch(args: LaunchArgs) -> ServerHandle:
    """Start the server in its own process group and wait until its health endpoint answers 200
    (and, with `launch.ready_completion`, a one-token completion too).

    A process that exits during start-up, or does not become healthy within the timeout, raises
    ServerError with the exit code and the log's last line; a hung one is stopped first. A server
    whose log says it listens (`launch.started_log`) while its port refuses connections is stopped;
    it, or one that exited saying its port is in use (the next attempt stops what it left), is
    launched again on a fresh port, up to `launch.listen_retries` times (ports perfloop picks).
    """
    retries = args.launch.listen_retries if args.launch.port == 0 else 0
    for _ in range(retries):
        try:
            return _launch_once(args, args.launch.port or free_port())
        except _FreshPort as err:
            report(f"launch #{args.launch_number}: {err}; again on a fresh port")
    return _launch_once(args, args.launch.port or free_port())


def _spawn(args: LaunchArgs, port: int, env: dict[str, str]) -> ProcessHandle:
    """Start the server marked as this launch's, the intent recorded first: the pid file names the
    mark before the process exists, and its pid and pgid once it does."""
    mark = mark_of(args.pid_file, args.log_path, args.launch_number)
    record = {"mark": mark, "port": port, "launch_number": args.launch_number}
    _record(args.pid_file, record)
    fault_point("server:spawning")
    argv = build_argv(args.launch.argv, port, args.python)
    with interrupts.deferred():  # a signal here waits for the pid file (a SIGKILL: the mark finds it)
        proc = host.start_background(
            argv, args.repo, args.log_path, {**env, host.MARK_ENV: mark}, inherit=False
        )
        fault_point("server:forked")
        _record(args.pid_file, {**record, "pid": proc.pid, "pgid": proc.pgid})
    fault_point("server:spawned")
    return proc


def _launch_once(args: LaunchArgs, port: int) -> ServerHandle:
    """One attempt of `launch` on `port`."""
    subst = {k: build_argv([v], port, args.python)[0] for k, v in args.launch.env.items()}
    extra = {k: v.replace("{repo}", str(args.repo)) for k, v in subst.items()}
    passed_env(args.launch.pass_env)  # all set, and registered as secrets
    for name in filter(secrets.looks_secret, extra):
        secrets.register(extra[name])  # a `{...}` template in a secret-named launch.env variable
    env = secrets.server_env(os.environ, extra, args.launch.pass_env)
    if args.profile_dir is not None:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        env["PERFLOOP_PROFILE_DIR"] = str(args.profile_dir)
    stop_pid_file(args.pid_file, args.repo, args.launch.stop_grace_s)
    since = args.log_path.stat().st_size if args.log_path.exists() else 0  # a cut attempt's lines: again
    proc = _spawn(args, port, env)
    base_url = build_argv([args.launch.base_url], port, args.python)[0]
    health_path = args.launch.health_path
    t0 = time.monotonic()
    deadline = t0 + args.launch.startup_timeout_s
    started = re.compile(args.launch.started_log) if args.launch.started_log else None
    listening_at: float | None = None
    while time.monotonic() < deadline:
        gone = not host.group_members(proc.pgid)  # also reaps our exited children
        code = host.exit_code(proc.pid)
        if code is not None or gone:
            secrets.scrub_file(args.log_path)
            log = host.tail(args.log_path, 20, since)
            raise (_FreshPort if PORT_TAKEN.search(log) else ServerError)(  # the next try stops what it left
                f"server exited with code {code if code is not None else '?'} during start-up "
                f"(log {args.log_path}): {_last_line(log)}"
            )
        code = get_status(base_url + health_path, timeout_s=1.0)
        if code == 404 and health_path != "/health":
            health_path = "/health"  # e.g. /health_generate on a build without it
        if code is None and started is not None:
            if listening_at is None and started.search(host.tail(args.log_path, 50, since)):
                listening_at = time.monotonic()
            elif listening_at is not None and time.monotonic() - listening_at > LISTEN_GRACE_S:
                _given_up(args, proc)
                raise _FreshPort(
                    f"its log said it started, but nothing listened on port {port} for "
                    f"{LISTEN_GRACE_S:.0f}s (log {args.log_path})"
                    f"{_port_line(host.tail(args.log_path, 200, since), port)}"
                )
        if code == 200 and (not args.launch.ready_completion or _completes(base_url)):
            _check_listener(args, port, proc)
            return ServerHandle(
                process=proc,
                base_url=base_url,
                port=port,
                health_path=health_path,
                tree_sha256=args.tree_sha256,
                instrumented=args.instrumented,
                profile_dir=args.profile_dir,
                launch_number=args.launch_number,
                pid_file=args.pid_file,
                launch_argv=args.launch.argv,
                startup_s=time.monotonic() - t0,
            )
        report(
            f"launch #{args.launch_number}{' (again)' if since else ''}: waiting for {base_url}{health_path} "
            f"({time.monotonic() - t0:.0f}s) - {_last_line(host.tail(args.log_path, 3, since))[:80]}"
        )
        time.sleep(0.25)
    _given_up(args, proc)
    secrets.scrub_file(args.log_path)
    raise ServerError(
        f"server did not become healthy within {args.launch.startup_timeout_s:.0f}s and was stopped "
        f"(log {args.log_path}): {_last_line(host.tail(args.log_path, 20, since))}"
        f"{_port_line(host.tail(args.log_path, 200, since), port)}"
    )


@tool("server.status")
def status(args: ServerArgs) -> ServerStatus:
    """Whether the server's process group is alive and its health endpoint answers."""
    alive = bool(host.group_members(args.server.process.pgid))
    healthy = alive and get_status(args.server.base_url + args.server.health_path, timeout_s=2.0) == 200
    return ServerStatus(alive=alive, healthy=healthy)


@tool("server.stop")
def stop(args: ServerArgs) -> ServerStatus:
    """Stop the server's whole process group: SIGTERM, then SIGKILL after the grace period."""
    handle = args.server
    killed = host.stop_group(handle.process.pgid, args.grace_s)
    mark = mark_of(handle.pid_file, handle.process.log_path, handle.launch_number)
    host.stop_marked(lambda m: m == mark, args.grace_s)  # processes that left its group
    secrets.scrub_file(handle.process.log_path)
    pid_file = handle.pid_file
    if (
        pid_file is not None
        and pid_file.exists()
        and json.loads(pid_file.read_text()).get("pgid") == handle.process.pgid
    ):
        pid_file.unlink()  # only our own record: it may already name a newer server
    return ServerStatus(alive=False, healthy=False, killed=killed)


@tool("server.stop_recorded")
def stop_recorded(args: PidFileArgs) -> ServerStatus:
    """Stop the server a session's pid file names, if it still runs in the repo (orphan clean-up)."""
    stopped = stop_pid_file(args.pid_file, args.repo, args.grace_s)
    return ServerStatus(alive=False, healthy=False, killed=stopped)


@tool("server.stop_marked")
def stop_marked(args: MarkedArgs) -> StoppedServers:
    """Stop every server of a session on this host (marked as launched for a pid file under its
    folder) but the one marked `keep`: what a killed attempt spawned, recorded or not."""
    folder = f"{args.folder}/"
    chosen = lambda mark: mark.startswith(folder) and mark != args.keep
    return StoppedServers(pids=host.stop_marked(chosen, args.grace_s))
