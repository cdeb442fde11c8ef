"""A session's servers found by the mark in their environment, on real processes; and the one
function for text from outside about to be shown (issue 50)."""

from __future__ import annotations

import time
from pathlib import Path

from state.engines.process import MarkedArgs
from tools import secrets, server
from tools.hosts import local


def test_a_session_sweep_stops_its_marked_processes_even_out_of_their_group_and_no_other(
    tmp_path: Path,
) -> None:
    ours, other = tmp_path / "sessions" / "a", tmp_path / "sessions" / "a-fork"
    marks = [f"{ours}/server.pid#1", f"{ours}/reference.pid#3", f"{other}/server.pid#1"]
    script = "setsid sleep 300 & sleep 300"  # a child that leaves the server's group and session
    started = [
        local.start_background(["bash", "-c", script], tmp_path, tmp_path / f"{n}.log", {local.MARK_ENV: m})
        for n, m in enumerate(marks)
    ]

    def groups(mark: str) -> set[int]:
        return set(local.marked(lambda m: m == mark).values())

    deadline = time.monotonic() + 10
    while any(len(groups(m)) < 2 for m in marks) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        escaped = groups(marks[0]) - {started[0].pgid}
        assert escaped, "the setsid child runs in a group of its own"
        found = server.stop_marked(MarkedArgs(folder=ours, keep=marks[1], grace_s=2)).pids
        assert set(found) >= escaped and groups(marks[0]) == set()  # its escaped child too
        assert len(groups(marks[1])) == 2 and len(groups(marks[2])) == 2  # kept, another session's
    finally:
        local.stop_marked(lambda mark: mark.startswith(str(tmp_path)), grace_s=2)
    assert local.marked(lambda mark: mark.startswith(str(tmp_path))) == {}


def test_text_from_outside_has_secrets_masked_and_hidden_characters_shown() -> None:
    passed = "plain-named-value-1234"
    secrets.register(passed)  # as launch.pass_env registers a value, whatever its name
    line = (
        f"cfg key={passed} openai=sk-proj-abcdefghijklmnop0123 gh=ghp_abcdefghijklmnopqrstuv "
        "aws=AKIAABCDEFGHIJKLMNOP auth: Bearer eyJhbGciOi.J9x-y_z store=postgresql://u:pw-1@db:5432/x "
        "max_tokens=12\x1b[2K\rdone\tok\n"
    )
    shown = secrets.outside(line)
    assert shown == (
        "cfg key=*** openai=*** gh=*** aws=*** auth: Bearer *** store=postgresql://u:***@db:5432/x "
        "max_tokens=12\\x1b[2K\\x0ddone\tok\n"
    )
    assert secrets.outside(shown) == shown  # shown twice (a host's line, then here): the same
