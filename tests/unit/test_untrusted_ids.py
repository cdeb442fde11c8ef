"""Identifiers and paths from outside: session ids on the command line, hostile exports, write roots.

The CLI runs in-process (Typer's runner); every refusal is exit 2 with one line naming the field,
and the `scratch` fixture fails the test if anything is written outside $PERFLOOP_HOME.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from tools.errors import ConfigError
from tools.paths import inside, session_id
from tools.store.sessions import SessionStore

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "sessions" / "demo-session.json.gz"
DEMO = json.loads(gzip.decompress(FIXTURE.read_bytes()))
HOSTILE_IDS = ["../../..", "/tmp/abs", "a/b", "..", "x" * 65, "_under"]


def cli(scratch, *args: str):
    """Run the CLI in-process with the scratch home; (exit code, stdout, stderr)."""
    result = CliRunner().invoke(app, list(args), env={"PERFLOOP_HOME": str(scratch.home)})
    return result.exit_code, result.stdout, result.stderr


def one_line_refusal(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("sid", HOSTILE_IDS)
def test_session_ids_are_one_pattern_everywhere(scratch, sid: str) -> None:
    out = scratch.inputs / "out.json"
    scratch.allow(out)
    commands = [
        ("show", sid),
        ("replay", sid),
        ("resume", sid),
        ("approve", sid),
        ("reject", sid, "--reason", "no"),
        ("export", sid, "-o", str(out)),
        ("fork", sid, "--at", "profile"),
        ("abandon", sid),
    ]
    for args in commands:
        code, _, err = cli(scratch, *args)
        one_line_refusal(code, err, "SESSION", "not a session id")
    assert not out.exists()


def test_the_store_refuses_path_like_ids(scratch) -> None:
    store = SessionStore(scratch.home / "sessions.sqlite")
    for sid in ("../x", "/etc"):
        with pytest.raises(ConfigError, match="not a session id"):
            store.get_session(sid)
        with pytest.raises(ConfigError, match="not a session id"):
            store.tool_calls(sid)
    store.close()


def export_file(scratch, name: str, doc, raw: bytes | None = None) -> Path:
    data = raw if raw is not None else json.dumps(doc).encode()
    return scratch.write(name, gzip.compress(data) if name.endswith(".gz") else data)


def with_id(sid) -> dict:
    doc = copy.deepcopy(DEMO)
    doc["session"]["id"] = sid
    for state in doc["initial"]:
        state["session_id"] = sid
    for call in doc["tool_calls"]:
        call["session_id"] = sid
    return doc


def mutated(path: str, value) -> dict:
    doc = copy.deepcopy(DEMO)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key) if isinstance(node, list) else key]
    node[int(last) if isinstance(node, list) else last] = value
    return doc


HOSTILE_EXPORTS = {
    "path-like id": (with_id("../../.."), "session.id"),
    "absolute id": (with_id("/tmp/perfloop-escape"), "session.id"),
    "id is a number": (with_id(7), "session.id"),
    "list-shaped": ([DEMO], "top level is a JSON list"),
    "string-shaped": ("perfloop-session/1", "top level is a JSON str"),
    "session is a list": (mutated("session", [1]), "`session` must be a JSON object"),
    "tool_calls is an object": (mutated("tool_calls", {"a": 1}), "`tool_calls` must be a JSON list"),
    "seq is text": (mutated("tool_calls.0.seq", "zero"), "tool_calls.0.seq"),
    "call of another session": (mutated("tool_calls.0.session_id", "other"), "another session"),
    "repeated call number": (mutated("tool_calls.1.seq", 0), "repeated call numbers"),
    "initial of wrong type": (mutated("initial.0.target", "x"), "initial.0.target"),
    "initial of another session": (mutated("initial.0.session_id", "other"), "initial.0.session_id"),
    "answer of wrong type": (mutated("answers", [{"approved": "perhaps"}]), "answers.0"),
    "unknown format": (mutated("format", "other/9"), "is not 'perfloop-session/1'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_EXPORTS))
def test_a_hostile_export_is_one_line_and_writes_nothing(scratch, case: str) -> None:
    doc, needle = HOSTILE_EXPORTS[case]
    for name in ("x.json", "x.json.gz"):
        code, _, err = cli(scratch, "import", str(export_file(scratch, f"{case}-{name}", doc)))
        one_line_refusal(code, err, needle)
    assert cli(scratch, "sessions", "--json")[1].strip() == "[]"


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x1f\x8b\x08\x00garbage", gzip.compress(b"{")[:-6], b"[" * 100000, b"\xff\xfe", b"{}"],
    ids=["empty", "bad-gzip", "truncated-gzip", "deep", "not-utf8", "empty-object"],
)
def test_a_broken_export_file_is_one_line(scratch, raw: bytes) -> None:
    code, _, err = cli(scratch, "import", str(export_file(scratch, "b.json", None, raw)))
    one_line_refusal(code, err, "export")


def test_a_real_export_imports_once_and_replays(scratch) -> None:
    code, out, err = cli(scratch, "import", str(FIXTURE))
    assert code == 0, err
    code, _, err = cli(scratch, "import", str(FIXTURE))
    one_line_refusal(code, err, "already exists")
    code, out, err = cli(scratch, "replay", DEMO["session"]["id"], "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["matches_recording"] is True


def test_session_id_and_inside(tmp_path: Path) -> None:
    assert session_id("20261129-124432-a52f") == "20261129-124432-a52f"
    with pytest.raises(ConfigError, match="^--x: "):
        session_id("../a", "--x")
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True)
    os.symlink(tmp_path, home / "sessions" / "link")
    assert inside(home / "sessions" / "a", [home], "f") == (home / "sessions" / "a").resolve()
    with pytest.raises(ConfigError, match="^session folder: .* outside"):
        inside(home / "sessions" / "link" / "x", [home], "session folder")
    with pytest.raises(ConfigError, match="outside"):
        inside(home / ".." / "x", [home], "f")
