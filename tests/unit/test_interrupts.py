"""tools/interrupts.py: signals become `Interrupted` in the main thread, deferred around a pid file."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tools import interrupts
from tools.interrupts import Interrupted


def send(sig: signal.Signals) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_raises_interrupted_with_the_shell_exit_code(sig: signal.Signals, code: int) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(Interrupted) as caught, interrupts.catching():
        send(sig)
    assert caught.value.exit_code == code and caught.value.signum == sig
    assert signal.getsignal(sig) is before  # restored


def test_a_signal_inside_deferred_waits_for_the_block_and_later_ones_are_only_noted() -> None:
    reached = []
    with pytest.raises(Interrupted) as caught, interrupts.catching():
        with interrupts.deferred():
            send(signal.SIGTERM)
            reached.append("pid file written")
        reached.append("not reached")
    assert reached == ["pid file written"] and caught.value.signum == signal.SIGTERM
    with interrupts.catching():
        with pytest.raises(Interrupted):
            send(signal.SIGINT)
        send(signal.SIGINT)  # during the clean-up: noted, not raised
        reached.append("clean-up finished")
        assert interrupts.stopping() == signal.SIGINT  # the door refuses further tools
    assert reached[-1] == "clean-up finished" and interrupts.stopping() is None


def test_a_session_running_now_is_not_called_an_earlier_one_and_a_killed_one_is(tmp_path: Path) -> None:
    """Issue 63 item 9: "servers started by earlier sessions still run" named a session that was
    running then, and a SIGKILLed one, whose lease had not yet expired, was said to run beside. A
    session whose lease holder runs is running now, its servers its own; one whose holder on this
    machine is gone left its servers behind: named so, with the command that stops them."""
    import json
    import subprocess

    from agent.sessions.interrupts import running_lines
    from tools.store.lease import _start_ticks, machine_id
    from tools.store.sessions import SessionStore

    killed, live, ended = "20261206-080000-aaaa", "20261206-080100-bbbb", "20261206-075900-cccc"
    for sid in (killed, live, ended):
        folder = tmp_path / "sessions" / sid
        folder.mkdir(parents=True)
        (folder / "server.pid").write_text(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0)}))
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process of this machine that no longer runs: the SIGKILLed session's holder
    here = machine_id(tmp_path)
    store = SessionStore.open(tmp_path)
    try:
        db = store.db
        for sid, pid in ((killed, gone.pid), (live, os.getpid())):
            holder = f"{here}:{pid}:{_start_ticks(os.getpid())}"
            db.run(
                f"INSERT INTO session_leases VALUES (?, ?, ?, ?, {db.now} + ?)", (sid, holder, "vm", pid, 600)
            )
        held = store.held()
    finally:
        store.close()
    assert held == {live: f"vm pid {os.getpid()}"}  # the killed one's lease is still unexpired
    me, group = os.getpid(), os.getpgid(0)
    assert running_lines(tmp_path, held) == [
        f"warning: servers started by earlier sessions still run: pid {me} (session {ended}), pid {me} "
        f"(session {killed}); stop them with `kill -- -{group}`",
        f"session {live} is running now (vm pid {me}); its servers are its own: pid {me}",
    ]
    assert running_lines(tmp_path / "elsewhere", held) == []
