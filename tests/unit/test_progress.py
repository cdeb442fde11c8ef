"""Progress lines: shown by the reporter, kept (redacted) in a running session's folder for the
approval page, prefixed with where in a step they come from."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from tools import progress, secrets


def test_lines_are_kept_redacted_while_a_session_runs_and_removed_after(tmp_path: Path) -> None:
    shown: list[str] = []
    progress.set_reporter(shown.append)
    secret = "sk-progress-test-0123456789abcdef"
    secrets.register(secret)
    try:
        progress.report("before any session")  # nowhere to keep it
        assert progress.read_latest(tmp_path) is None
        progress.keep_in(tmp_path / "session")
        with progress.within("look 2/3"):
            progress.report("measuring candidate: request 4/6")
        latest = progress.read_latest(tmp_path / "session")
        assert latest is not None and latest["message"] == "look 2/3: measuring candidate: request 4/6"
        progress.report(f"server log: token {secret}")
        kept = (tmp_path / "session" / progress.FILE).read_text()
        assert secret not in kept and "token" in kept
        assert shown[1] == "look 2/3: measuring candidate: request 4/6"
        progress.report("after the look")
        assert progress.read_latest(tmp_path / "session")["message"] == "after the look"  # type: ignore[index]
    finally:
        progress.keep_in(None)
        progress.set_reporter(lambda message: None)
    assert not (tmp_path / "session" / progress.FILE).exists()
    assert progress.read_latest(tmp_path / "session") is None


def test_each_thread_keeps_its_own_prefix() -> None:
    """A reference host's thread (cross-host arms) or a parallel trial's reports under its own
    `within`, not the session thread's, however their blocks interleave."""
    shown: list[str] = []
    progress.set_reporter(shown.append)
    entered, done = threading.Event(), threading.Event()

    def other() -> None:
        with progress.within("reference host x"):
            entered.set()
            done.wait(5)
            progress.report("launching")

    t = threading.Thread(target=other)
    try:
        with progress.within("round 1/3"):
            t.start()
            assert entered.wait(5)
        progress.report("after the round")  # its block closed while the other's is still open
        done.set()
        t.join(5)
    finally:
        progress.set_reporter(lambda message: None)
    assert sorted(shown) == ["after the round", "reference host x: launching"]


def test_plain_lines_are_timestamped_spaced_and_never_quiet_for_long() -> None:
    """For a log: the first report at once, the next held back until the gap has passed (then
    written, the latest of those held), and the latest repeated with how long it has been on it after a quiet spell."""
    import time

    written: list[str] = []
    with progress.PlainLines(written.append, gap_s=0.5, quiet_s=2.0) as lines:
        lines("step launch")
        lines("waiting for health: 1s")
        lines("waiting for health: 2s")  # held back: within the gap
        assert len(written) == 1 and written[0].endswith(" perfloop: step launch")
        time.sleep(1.5)
        assert written[1].endswith(" perfloop: waiting for health: 2s"), written  # the latest held
        time.sleep(3.0)
        assert re.search(r" perfloop: waiting for health: 2s \(still, [34] s on it\)$", written[-1]), written
    assert not any("health: 1s" in w for w in written)
    time.strptime(written[0][:19], "%Y-%m-%d %H:%M:%S")
    count = len(written)
    time.sleep(1.0)
    assert len(written) == count  # nothing once the command ended
