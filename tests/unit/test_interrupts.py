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


def test_a_session_running_now_is_not_called_an_earlier_one(tmp_path: Path) -> None:
    """Issue 63: "servers started by earlier sessions still run" named a session that was running
    then. A server whose session holds its lease is said to run beside; one left behind, as before."""
    import json
    import os

    from agent.sessions.interrupts import running_line

    for sid in ("20261206-080000-aaaa", "20261206-080100-bbbb"):
        folder = tmp_path / "sessions" / sid
        folder.mkdir(parents=True)
        (folder / "server.pid").write_text(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0)}))
    line = running_line(tmp_path, {"20261206-080100-bbbb": "vm pid 42"})
    assert line == (
        f"warning: servers started by earlier sessions still run: pid {os.getpid()} (session "
        f"20261206-080000-aaaa); another session runs beside this one, its servers too: pid "
        f"{os.getpid()} (session 20261206-080100-bbbb, running now: vm pid 42)"
    )
    assert running_line(tmp_path, {}) == (
        f"warning: servers started by earlier sessions still run: pid {os.getpid()} (session "
        f"20261206-080000-aaaa), pid {os.getpid()} (session 20261206-080100-bbbb)"
    )
