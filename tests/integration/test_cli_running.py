"""The CLI's exit codes for what goes wrong after the arguments were read (agent/cli/running.py,
agent/cli/commands/sessions.py), on the shipped demo recording imported into a fresh home, then tampered
with in its SQLite store: a bug is one line and exit 3 (`PERFLOOP_DEBUG=1`: the traceback), and
`replay` of a session whose recorded summary differs from the replayed one exits 1."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from agent.cli.commands.sessions import READ_BACK
from tests.e2e.conftest import perfloop

RECORDING = Path(__file__).resolve().parents[1] / "data" / "sessions" / "demo-session.json.gz"


@pytest.fixture
def imported(tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "home"
    done = perfloop(home, "import", str(RECORDING))
    assert done.returncode == 0, done.stderr
    sid = re.search(r"imported session (\S+);", done.stdout.replace("\n", " "))
    assert sid, done.stdout
    return home, sid.group(1)


def edit_info(home: Path, change) -> None:
    """Rewrite the session's stored index entry (the `sessions.info` JSON) with `change`."""
    with sqlite3.connect(home / "sessions.sqlite") as db:
        (info,) = db.execute("SELECT info FROM sessions").fetchone()
        db.execute("UPDATE sessions SET info = ?", (json.dumps(change(json.loads(info))),))


def test_a_bug_is_one_line_and_exit_3_and_perfloop_debug_shows_the_traceback(
    imported: tuple[Path, str],
) -> None:
    home, sid = imported
    edit_info(home, lambda info: {"id": info["id"]})  # an entry perfloop never writes: a bug's input
    shown = perfloop(home, "show", sid)
    assert shown.returncode == 3, (shown.returncode, shown.stderr)
    assert shown.stderr.startswith("internal error: ValidationError: ") and shown.stderr.count("\n") == 1
    assert "PERFLOOP_DEBUG=1 shows the traceback" in shown.stderr and "Traceback" not in shown.stderr
    debug = perfloop(home, "show", sid, env={"PERFLOOP_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr, debug.stderr
    assert "internal error" not in debug.stderr and "ValidationError" in debug.stderr


def test_replay_exits_1_when_the_replayed_summary_differs_from_the_recorded_one(
    imported: tuple[Path, str],
) -> None:
    home, sid = imported
    same = perfloop(home, "replay", sid, "--json")
    assert same.returncode == 0, same.stderr[-2000:]

    def one_more_profile(info: dict) -> dict:  # not server_launches: an imported recording may
        info["summary"]["iterations"] += 1  # lack the launches of attempts cut short (not compared)
        return info

    edit_info(home, one_more_profile)
    differs = perfloop(home, "replay", sid, "--json")
    assert differs.returncode == 1, (differs.returncode, differs.stderr[-2000:])
    assert json.loads(differs.stdout.strip().splitlines()[-1])["matches_recording"] is False
    told = perfloop(home, "replay", sid)  # the replay kept under the same key, against the row as it is now
    assert told.returncode == 1 and told.stderr.endswith(
        f" transitions: DIFFERENT summary than recorded {READ_BACK}\n"
    )
