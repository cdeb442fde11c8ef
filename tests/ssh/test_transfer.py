"""host.fetch and host.push_tree through the door, with the connection dropped mid-transfer: the
test's own sshd is killed (every connection with it) and restarted while bytes are moving; the tool
reconnects, runs the transfer once more, and the result is whole."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from state.door.calls import FetchArgs, PushTreeArgs
from tests.recorders import MemoryRecorder
from tests.ssh.conftest import Sshd, free_port
from tools.door.live import LiveDoor
from tools.hosts import transfer
from tools.hosts.connect import close_all, connect


@pytest.fixture
def own(sshd: Sshd) -> Iterator[Sshd]:
    """A daemon of the test's own (same keys and home): restarting it hurts no other test."""
    daemon = Sshd(sshd.dir, free_port())
    daemon.start()
    yield daemon
    close_all()
    daemon.stop()


def drop_when(daemon: Sshd, ready: Callable[[], bool]) -> tuple[threading.Thread, threading.Event]:
    """A thread that kills and restarts `daemon` once `ready()`; the event is set after the drop."""
    dropped = threading.Event()

    def run() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not ready():
            time.sleep(0.005)
        daemon.stop()
        daemon.start()
        dropped.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, dropped


def test_a_trace_fetch_survives_a_dropped_connection(own: Sshd, tmp_path: Path) -> None:
    remote = tmp_path / "host" / "profiles" / "it0"
    remote.mkdir(parents=True)
    trace, summary = os.urandom(32 << 20), b"summary\n"
    (remote / "trace.json.gz").write_bytes(trace)
    (remote / "summary.txt").write_bytes(summary)
    local = tmp_path / "local" / "it0"
    part = local / "trace.json.gz.part"
    seen_partial = []

    def mid_fetch() -> bool:
        try:
            size = part.stat().st_size
        except FileNotFoundError:
            return False
        seen_partial.append(size)
        return size >= 1 << 20

    cfg = own.config(tmp_path)
    rec = MemoryRecorder()
    door = LiveDoor("s", rec)
    door.node = "profile"
    watcher, dropped = drop_when(own, mid_fetch)
    out = door.call(transfer.fetch, FetchArgs(host=cfg, remote=remote, local=local))
    watcher.join(timeout=60)
    assert dropped.is_set() and 0 < seen_partial[-1] < len(trace)  # dropped while bytes moved
    assert connect(cfg).conn.reconnects == 1
    assert out.path == local and (local / "trace.json.gz").read_bytes() == trace
    assert (local / "summary.txt").read_bytes() == summary
    assert sorted(p.name for p in local.iterdir()) == ["summary.txt", "trace.json.gz"]  # no .part left
    (call,) = rec.calls
    assert call.name == "host.fetch" and call.error is None


def test_a_tree_push_survives_a_dropped_connection(own: Sshd, tmp_path: Path) -> None:
    src = tmp_path / "demo" / "mla_server"
    files = {f"pkg{i % 4}/mod_{i}.py": os.urandom(192 << 10) for i in range(160)}
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    (src / "launch.sh").write_text("#!/bin/sh\n")
    (src / "launch.sh").chmod(0o755)
    dest = tmp_path / "host" / "demo" / "mla_server"

    def mid_push() -> bool:
        return dest.is_dir() and sum(1 for p in dest.rglob("*.py")) >= 20

    cfg = own.config(tmp_path)
    rec = MemoryRecorder()
    door = LiveDoor("s", rec)
    door.node = "prepare"
    watcher, dropped = drop_when(own, mid_push)
    done = door.call(transfer.push_tree, PushTreeArgs(host=cfg, src=src, dest=dest))
    watcher.join(timeout=60)
    assert dropped.is_set() and connect(cfg).conn.reconnects == 1
    assert done.note == f"uploaded {len(files) + 1} files to {dest}"
    assert {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*.py")} == files
    assert (dest / "launch.sh").stat().st_mode & 0o777 == 0o755
    assert not [p for p in dest.rglob("*") if ".tmp" in p.name]  # atomic writes: no partial files
    (call,) = rec.calls
    assert call.name == "host.push_tree" and call.error is None
