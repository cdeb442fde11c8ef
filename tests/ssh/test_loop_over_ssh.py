"""The whole loop on a target that lives on an SSH host: the real CLI, a real sshd, server and git.

The host is this machine reached through the test sshd as root, so the target checkout, the
server, git and the benchmark client all run in sshd's sessions; only the graph, the recording and
the fetched traces stay with the CLI (its own PERFLOOP_HOME).
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    CI_CORRECTNESS,
    CI_MEASURE,
    LOOP_NODES,
    git,
    kept_unless_drifted,
    last_json,
    make_repo,
    perfloop,
)
from tests.procs import processes_in
from tests.ssh.conftest import Sshd, answered_requests, free_port, remote_calls

BACKEND = "mla_server/attention/mla_backend.py"


# The sequential sessions here run at `looks=1`, as the local e2e sessions do (tests/e2e/test_loop.py):
# the fix's ~9x is kept at its first look, and three looks only made the baseline, and the accepted
# candidate topped up as the next reference, measure three times as many requests. The demo test
# runs the demo's own target (interleaved arms: its baseline measures `repeats` whatever the looks,
# and the fix is kept at the first look, so its 3 looks cost nothing).


def ssh_target(path: Path, repo: Path, sshd: Sshd, client: Path, *, arms: str, looks: int) -> Path:
    """A target TOML whose host is the test sshd (known_hosts and an SSH config with the key), its
    arms pinned (`[decide] arms`, see examples/targets/mla_server.toml), `looks` as in
    tests/e2e/conftest.write_target."""
    path.write_text(f"""
name = "mla_server over ssh"
kind = "mla_server"
repo = {json.dumps(str(repo))}
model = "mla-demo"
{sshd.host_toml(client, sys.executable, "keepalive_s = 2")}[launch]
argv = ["bash", "launch.sh", "--port", "{{port}}", "--preset", "cpu", "--threads", "1", "--layers", "1"]
# The local e2e runs inherit PYTHONDONTWRITEBYTECODE from the test environment; an SSH session
# starts from sshd's environment, so the target says it (else __pycache__ shows as untracked).
env = {{ PYTHON = "{{python}}", PYTHONDONTWRITEBYTECODE = "1" }}
startup_timeout_s = 120
{CI_MEASURE}[decide]
looks = {looks}
arms = "{arms}"
auto_aa_pairs = 0
{CI_CORRECTNESS}""")
    return path


def remote_session_dir(sshd: Sshd, session: str) -> Path:
    """The session's folder on the host: `~/.perfloop/sessions/<id>` in the test sshd's home."""
    return sshd.home / ".perfloop" / "sessions" / session


def host_logs(arms: str, judgement: dict) -> list[str]:
    """The server logs a one-patch session leaves on the host, from its decision's judgement:
    the baseline's and the candidate's; with interleaved arms the reference launched beside the
    candidate, and a confirming pair (reference and candidate again) when the judgement has one."""
    logs = ["server-1.log", "server-2.log"]
    if arms == "interleaved":
        logs.append("server-3-reference.log")
        if judgement["confirmation"]:
            logs += ["server-4-reference.log", "server-5-confirm.log"]
    return logs


def assert_same_result_as_local(
    home: Path, s: dict, repo: Path, sshd: Sshd, arms: str, owns_verdict: bool = True
) -> None:
    """What the local e2e run asserts: one accepted patch, same outputs, >=3x, clean tree; the
    arms measured as pinned (`arms`), read from the recorded judgement and the host's logs. A test
    whose subject is not the verdict (`owns_verdict` False: a dropped connection) also takes the
    fix judged inconclusive only because the machine drifted between its sequential arms
    (`kept_unless_drifted`); then nothing is committed and the rest must hold all the same."""
    assert s["status"] == "done", s
    kept = s["accepted"] == ["kv-cache-full-pool-cast"]
    if owns_verdict:
        assert kept, s["stop_reason"]
    else:
        kept = kept_unless_drifted(kept, s["decision"] or f"no judged decision: {s}")
    assert s["outputs_identical"] is (True if kept else None)
    assert not kept or s["speedup"] >= 3.0, s
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    (decided,) = shown["decisions"]
    j = decided["judgement"]
    assert decided["verdict"] == ("accepted" if kept else "inconclusive") and j["arms"] == arms, decided
    assert j["reference"] is not None and j["candidate"] is not None, j  # both arms' statistics
    logs = host_logs(arms, j)
    assert s["server_launches"] == len(logs), (s["server_launches"], logs)
    assert Path(s["repo"]) == repo
    # a run gives the checkout back on main, the demo's copy stays on its branch
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == (s["checkout"] or s["branch"])
    status = git(repo, "status", "--porcelain").splitlines()
    assert status == []  # the target's .gitignore covers the __pycache__ a server writes
    for f in repo.rglob("*.py"):
        assert "perfloop-instrumentation" not in f.read_text(), f"instrumentation left in {f}"
    if kept:
        log = git(repo, "log", "--format=%H%n%B", "-1", s["branch"])
        assert s["commits"][0] in log
        assert f"Perfloop-Session: {s['session']}" in log
        assert "Perfloop-Playbook: kv-cache-full-pool-cast" in log
        assert git(repo, "diff", "--name-only", f"{s['branch']}~1", s["branch"]).split() == [BACKEND]
    else:
        assert s["commits"] == [], s
    assert processes_in(repo) == [], "server process left running"
    nodes = [t["node"] for t in shown["transitions"]]
    assert nodes[:13] == LOOP_NODES and nodes[-1] == "finish"
    # Host-side files stayed on the host; the traces were fetched here for reading.
    host_dir = remote_session_dir(sshd, s["session"])
    assert sorted(p.name for p in (host_dir / "logs").iterdir()) == logs
    assert not (host_dir / "reference").exists()  # the reference's worktree is gone
    assert list((home / "sessions" / s["session"] / "profiles").rglob("trace.json.gz"))
    shutil.rmtree(host_dir)


def test_whole_loop_over_ssh_in_a_path_with_shell_syntax(sshd: Sshd, tmp_path: Path) -> None:
    """The demo target in a checkout whose path would run `$(touch ...)` if it reached a shell
    unquoted: the same result as the local run, nothing executed."""
    canary = Path(f"/tmp/pwned-{secrets.token_hex(4)}")
    nasty = tmp_path / f'it\'s a "repo" $(touch {canary}) `touch {canary}`'
    repo = make_repo(nasty / "engine")
    home = tmp_path / "home"
    target = ssh_target(tmp_path / "t.toml", repo, sshd, tmp_path / "client", arms="sequential", looks=1)
    proc = perfloop(home, "run", "--approve", "auto", str(target), "--json", timeout=400)
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    assert_same_result_as_local(home, s, repo, sshd, "sequential")
    assert not canary.exists()
    replayed = perfloop(home, "replay", s["session"], "--json")  # from the recording: no host needed
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True


def measured_url() -> str | None:
    """The server a running `bench.measure` call on the host measures, if one runs now."""
    return next((c["input"]["base_url"] for c in remote_calls() if c.get("name") == "bench.measure"), None)


def test_connection_dropped_mid_measurement_then_resumed(sshd: Sshd, tmp_path: Path) -> None:
    """sshd is killed (every connection with it) and restarted while the baseline is measured on
    the host: the executor reconnects, stops the interrupted attempt, measures again, and the
    session ends as the local run does."""
    own = Sshd(sshd.dir, free_port())  # its own daemon: restarting it hurts no other test
    # The drop comes once the baseline server has answered its first request (the warm-up): at
    # `looks=1` its 2 prompts x 3 timed requests (~0.6 s each) are still to come, and the remote
    # log's "bench.measure: connection lost" (asserted below) says the drop did land mid-measurement.
    own.start()
    dropped = threading.Event()

    def drop_during_measure() -> None:
        """Once the measured server has answered a request (its log on the host says so)."""
        logs = own.home / ".perfloop" / "sessions"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            url = measured_url()
            if url is not None and answered_requests(logs.glob("*/logs/server-*.log"), url):
                own.stop()
                own.start()
                dropped.set()
                return
            time.sleep(0.05)

    repo = make_repo(tmp_path / "engine")
    home = tmp_path / "home"
    target = ssh_target(tmp_path / "t.toml", repo, own, tmp_path / "client", arms="sequential", looks=1)
    watcher = threading.Thread(target=drop_during_measure, daemon=True)
    watcher.start()
    try:
        proc = perfloop(home, "run", "--approve", "auto", str(target), "--json", timeout=400)
        watcher.join(timeout=30)
        assert dropped.is_set(), "the measurement was never seen running on the host"
        assert proc.returncode == 0, proc.stderr[-2000:]
        s = last_json(proc)
        log = (home / "sessions" / s["session"] / "remote.log").read_text()
        assert "bench.measure: connection lost" in log and "reconnect #1" in log, log
        assert_same_result_as_local(home, s, repo, sshd, "sequential", owns_verdict=False)
    finally:
        own.stop()


def test_connection_dropped_during_a_launch_then_resumed(sshd: Sshd, tmp_path: Path) -> None:
    """sshd is killed (every connection with it) and restarted while the baseline server is being
    launched on the host (spawned, not yet healthy: the target's launch starts with a 3 s sleep, a
    slow server's start-up): the executor reconnects, stops the interrupted attempt, launches again
    (the relaunch stops the first attempt's server, which its pid file names), and the session ends
    as the local run does, no server left on the host."""
    own = Sshd(sshd.dir, free_port())  # its own daemon: restarting it hurts no other test
    own.start()
    repo, home = make_repo(tmp_path / "engine"), tmp_path / "home"
    target = ssh_target(tmp_path / "t.toml", repo, own, tmp_path / "client", arms="sequential", looks=1)
    target.write_text(
        target.read_text().replace(
            'argv = ["bash", "launch.sh",',
            'argv = ["bash", "-c", "sleep 3 && exec bash launch.sh \\"$@\\"", "launch",',
        )
    )
    dropped: list[int] = []

    def drop_during_launch() -> None:
        """Once the first launch waits for its server's health (the local progress line says so)."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for latest in home.glob("sessions/*/progress.json"):
                if "launch #1: waiting for" in latest.read_text(errors="replace"):
                    dropped.extend(processes_in(repo))  # the attempt's server, still starting
                    own.stop()
                    own.start()
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=drop_during_launch, daemon=True)
    watcher.start()
    try:
        proc = perfloop(home, "run", "--approve", "auto", str(target), "--json", timeout=400)
        watcher.join(timeout=30)
        assert dropped, "the launch was never seen waiting on the host"
        assert proc.returncode == 0, proc.stderr[-2000:]
        s = last_json(proc)
        log = (home / "sessions" / s["session"] / "remote.log").read_text()
        assert "server.launch: connection lost" in log and "reconnect #1" in log, log
        assert_same_result_as_local(home, s, repo, sshd, "sequential", owns_verdict=False)  # none left there
    finally:
        own.stop()


def test_demo_on_a_new_host_creates_the_checkout_there(
    sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`perfloop demo --host URL --trust-new-host --host-python PY` with the user's own ~/.ssh
    (config naming the key, no known_hosts yet): the tree is uploaded, the repo made on the host.
    The demo at one layer (`--server-args`), as in tests/e2e/test_loop.py."""
    user_home = tmp_path / "user"
    (user_home / ".ssh").mkdir(parents=True)
    (user_home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {sshd.client_key}\n")
    monkeypatch.setenv("HOME", str(user_home))
    home = tmp_path / "home"
    proc = perfloop(
        home,
        "demo",
        "--host",
        f"ssh://root@127.0.0.1:{sshd.port}",
        "--trust-new-host",
        "--host-python",
        sys.executable,
        "--server-args=--layers 1 --threads 1",  # one layer of four, as every SSH target runs it
        "--json",
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    repo = sshd.home / ".perfloop" / "workspaces" / s["session"] / "mla_server"
    try:
        assert (user_home / ".ssh" / "known_hosts").read_text().split()[
            1:
        ] == sshd.known_hosts_line().split()[1:]
        assert git(repo, "log", "--format=%s", "main").strip() == "perfloop: import mla_server"
        # examples/targets/mla_server.toml (the demo's target) pins interleaved arms
        assert_same_result_as_local(home, s, repo, sshd, "interleaved")
    finally:
        shutil.rmtree(repo.parent, ignore_errors=True)


def test_sigkill_mid_session_over_ssh_then_resume(sshd: Sshd, tmp_path: Path) -> None:
    """perfloop is SIGKILLed three times while its target lives on the SSH host: after the first
    server started there (pid file on the host, launch not recorded), after the patch was committed
    on the host (not recorded), and before the candidate is measured. `perfloop resume` each time
    reconciles with what the host holds: one commit, no server left behind, the same result."""
    repo = make_repo(tmp_path / "engine")
    home = tmp_path / "home"
    target = ssh_target(tmp_path / "t.toml", repo, sshd, tmp_path / "client", arms="sequential", looks=1)
    faults = tmp_path / "faults.txt"
    points = ["tool:server.launch", "tool:repo.apply_patch", "node:measure"]
    faults.write_text("".join(p + "\n" for p in points))
    env = {"PERFLOOP_FAULTS_FILE": str(faults)}
    first = perfloop(
        home, "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1", timeout=400, env=env
    )
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    session = last_json(perfloop(home, "sessions", "--json"))[0]["id"]
    kills = 1
    while kills < 10:
        proc = perfloop(home, "resume", session, "--json", timeout=400, env=env)
        if proc.returncode != -signal.SIGKILL:
            break
        kills += 1
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert kills == len(points) and faults.read_text() == ""
    s = last_json(proc)
    assert s["status"] == "done" and s["rejected"] in ([], ["kv-cache-full-pool-cast"]), s
    if kept_unless_drifted(s["accepted"] == ["kv-cache-full-pool-cast"], s["decision"]):
        assert s["outputs_identical"] is True
        assert git(repo, "rev-list", "--count", f"main..{s['branch']}").strip() == "1"  # committed once
    else:  # rolled back: the tree is main's again
        assert git(repo, "diff", "main", "HEAD") == ""
    assert git(repo, "status", "--porcelain") == ""
    for f in repo.rglob("*.py"):
        assert "perfloop-instrumentation" not in f.read_text(), f"instrumentation left in {f}"
    assert processes_in(repo) == [], "server process left running on the host"
    shutil.rmtree(remote_session_dir(sshd, session))
