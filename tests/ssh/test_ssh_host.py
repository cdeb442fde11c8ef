"""SSHHost against a real sshd: commands, process groups and files, on paths full of shell syntax."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from tests.procs import processes_in
from tools.hosts import local as local_host
from tools.hosts.ssh import SSHHost

NASTY = "dir with 'single' \"double\" $(touch /tmp/pwned-$RANDOM) `id`; &"


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_run_streams_lines_and_reports_exit_codes(host: SSHHost, tmp_path: Path) -> None:
    ok = host.run(["bash", "-c", "echo out; echo err >&2; exit 3"], tmp_path, env={"X": "1"})
    assert (ok.returncode, ok.stdout, ok.stderr) == (3, "out\n", "err\n")
    assert host.run(["sh", "-c", 'echo "$X"'], tmp_path, env={"X": "a b"}).stdout == "a b\n"
    seen: list[tuple[float, str, str]] = []
    t0 = time.monotonic()
    host.run(
        ["sh", "-c", "echo one; sleep 1; echo two >&2"],
        tmp_path,
        on_line=lambda stream, line: seen.append((time.monotonic() - t0, stream, line)),
    )
    assert [(s, line) for _, s, line in seen] == [("stdout", "one"), ("stderr", "two")]
    assert seen[1][0] - seen[0][0] > 0.7  # "one" arrived while the command was still running
    missing = host.run(["true"], tmp_path / "nope")
    assert missing.returncode == 1 and "nope" in missing.stderr


def test_timeout_kills_the_remote_process_group(host: SSHHost, tmp_path: Path) -> None:
    slow = host.run(["sh", "-c", "sleep 30 & sleep 30"], tmp_path, timeout_s=1)
    assert slow.returncode == -9 and "timeout" in slow.stderr and slow.duration_s < 10
    assert wait_for(lambda: processes_in(tmp_path) == [])


def test_shell_syntax_in_paths_is_never_executed(host: SSHHost, tmp_path: Path) -> None:
    before = set(Path("/tmp").glob("pwned-*"))
    nasty = tmp_path / NASTY
    host.makedirs(nasty)
    assert host.run(["pwd"], nasty).stdout == f"{nasty}\n"
    name = nasty / NASTY  # "/" inside the $(...) makes this a file in nested directories
    host.makedirs(name.parent)
    assert host.run(["touch", str(name)], nasty).returncode == 0
    assert name.is_file() and host.exists(name)
    host.write_file_atomic(f"{name}.txt", NASTY)
    assert Path(f"{name}.txt").read_text() == NASTY
    assert host.run(["sh", "-c", 'echo "$V"'], nasty, env={"V": NASTY}).stdout == f"{NASTY}\n"
    assert set(Path("/tmp").glob("pwned-*")) == before


def test_background_group_survives_the_channel_and_is_stopped(host: SSHHost, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "server.log"
    handle = local_host.start_background(["sh", "-c", "echo started; sleep 300 & sleep 300"], tmp_path, log)
    pgid, sid = (int(x) for x in Path(f"/proc/{handle.pid}/stat").read_text().rsplit(")", 1)[1].split()[2:4])
    assert handle.pid == handle.pgid == pgid == sid
    assert wait_for(lambda: len(host.group_members(handle.pgid)) == 3)
    assert wait_for(lambda: local_host.tail(log) == "started")
    assert host.stop_group(handle.pgid, grace_s=5) is False
    assert host.group_members(handle.pgid) == [] and processes_in(tmp_path) == []
    assert host.stop_group(handle.pgid) is False


def test_a_group_that_ignores_term_is_killed(host: SSHHost, tmp_path: Path) -> None:
    script = "trap '' TERM; sleep 300 & sleep 300; wait"
    handle = local_host.start_background(["bash", "-c", script], tmp_path, tmp_path / "log")
    assert wait_for(lambda: len(host.group_members(handle.pgid)) == 3)
    t0 = time.monotonic()
    assert host.stop_group(handle.pgid, grace_s=1) is True
    assert time.monotonic() - t0 < 15
    assert host.group_members(handle.pgid) == [] and processes_in(tmp_path) == []


def test_zombies_are_not_counted(host: SSHHost, tmp_path: Path) -> None:
    # sh forks a short sleep, then becomes a long sleep that never reaps it: a zombie in the group.
    handle = local_host.start_background(
        ["sh", "-c", "sleep 0.1 & exec sleep 300"], tmp_path, tmp_path / "log"
    )

    def zombie_present() -> bool:
        ps = host.run(["ps", "-o", "stat=", "-g", str(handle.pgid)], "/").stdout.split()
        return "Z" in "".join(s[0] for s in ps)

    assert wait_for(zombie_present)
    assert host.group_members(handle.pgid) == [handle.pid]
    assert host.stop_group(handle.pgid, grace_s=5) is False
    assert host.group_members(handle.pgid) == []


def test_atomic_write_never_shows_a_partial_file_and_keeps_the_mode(host: SSHHost, tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    old, new = b"o" * 1024, os.urandom(8 << 20)
    target.write_bytes(old)
    target.chmod(0o751)
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.add(len(target.read_bytes()))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        host.write_file_atomic(target, new)
    finally:
        done.set()
        watcher.join()
    assert seen <= {len(old), len(new)} and target.read_bytes() == new
    assert target.stat().st_mode & 0o7777 == 0o751
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.sh"]
    host.write_file_atomic(tmp_path / "new.txt", "hello")
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644
    assert not host.exists(tmp_path / "missing.log")


def test_fetch_streams_a_large_file_with_progress(host: SSHHost, tmp_path: Path) -> None:
    remote, local = tmp_path / "trace.json.gz", tmp_path / "copy" / "trace.json.gz"
    data = os.urandom(6 << 20)
    remote.write_bytes(data)
    progress: list[tuple[int, int]] = []
    assert host.fetch(remote, local, lambda done, total: progress.append((done, total))) == len(data)
    assert local.read_bytes() == data and not local.with_name(local.name + ".part").exists()
    assert len(progress) > 10 and progress[-1] == (len(data), len(data))
    assert [d for d, _ in progress] == sorted(d for d, _ in progress)
