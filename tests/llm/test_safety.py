"""Nothing secret reaches the endpoint: symlinks out of the repo, gitignored and secret-looking
files are unreadable through every tool; secrets in readable files and in the launch command are
masked. Checked in the scripted endpoint's request log (every request body, as sent)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agent.steps.propose import propose
from tests.llm.conftest import fix_answer, loop_state, runtime
from tests.llm.fake_openai import ScriptedModel, call, reply
from tests.recorders import MemoryRecorder
from tools.door.live import LiveDoor
from tools.llm.redact import redact_argv

pytestmark = pytest.mark.timeout(60)

IGNORED_KEY = "sk-ignored-0123456789abcdefghij"
OUTSIDE = "outside-secret-7f3a9c"
TRACKED_KEY = "tracked-literal-5e8d1b2c"


def booby_trap(tmp_path: Path, repo: Path) -> None:
    """Secrets where a model may look: a gitignored .env and folder, files outside the repo behind
    symlinks (to a file and to a folder), a tracked file assigning a key literal."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "creds.py").write_text(f"TOKEN = '{OUTSIDE}'\n")
    (repo / ".gitignore").write_text(".env\nlocal/\n")
    (repo / ".env").write_text(f"OPENAI_API_KEY={IGNORED_KEY}\n")
    (repo / "local").mkdir()
    (repo / "local" / "notes.py").write_text(f"key = {IGNORED_KEY!r}\n")
    os.symlink(outside / "creds.py", repo / "mla_server" / "creds.py")
    os.symlink(outside, repo / "mla_server" / "ext")
    (repo / "settings.py").write_text(f'api_key = "{TRACKED_KEY}"\n')
    subprocess.run(["git", "-C", str(repo), "add", ".gitignore", "settings.py"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "settings"], check=True)


def test_no_tool_reads_a_secret_and_the_request_log_holds_none(tmp_path: Path, engine: Path) -> None:
    booby_trap(tmp_path, engine)
    reads = [
        call("read_file", path=".env"),
        call("read_file", path="local/notes.py"),
        call("read_file", path="mla_server/creds.py"),
        call("read_file", path="mla_server/ext/creds.py"),
        call("grep", pattern="outside|sk-|key|TOKEN"),
        call("grep", pattern="TOKEN", path="mla_server/ext"),
        call("list_dir", path="mla_server"),
        call("list_dir"),
        call("read_file", path="settings.py"),
    ]
    with ScriptedModel([reply(None, *reads), reply(fix_answer())]) as model:
        state = loop_state(tmp_path, engine, model.base_url)
        launch = state.target.launch.model_copy(
            update={"argv": [*state.target.launch.argv, "--api-key", OUTSIDE]}
        )
        state = state.model_copy(update={"target": state.target.model_copy(update={"launch": launch})})
        cmd = propose(state, runtime(LiveDoor("s", MemoryRecorder())))
    assert cmd.goto == "approve"
    sent = json.dumps(model.requests)
    for secret in (IGNORED_KEY, OUTSIDE, TRACKED_KEY):
        assert secret not in sent
    answers = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert answers[0] == "error: refused: '.env' looks like it holds secrets: not readable"
    assert answers[1] == "error: refused: 'local/notes.py' is ignored by git: not readable"
    assert answers[2] == answers[3].replace("ext/creds.py", "creds.py")
    assert "leads outside the repository" in answers[2]
    assert 'settings.py:1: api_key = "***"' in answers[4] and "ext/" not in answers[4]
    assert "leads outside the repository" in answers[5]
    assert "creds.py" not in answers[6] and "ext/" not in answers[6]
    assert ".env" not in answers[7] and "local/" not in answers[7] and "settings.py" in answers[7]
    assert 'api_key = "***"' in answers[8]
    assert "--api-key ***" in model.requests[0]["messages"][1]["content"]


def test_launch_option_secrets_are_masked_not_their_neighbours() -> None:
    argv = ["python", "-m", "sglang", "--api-key", "k3y-value", "--hf-token=abc", "--max-total-tokens", "64"]
    assert redact_argv(argv) == [
        "python",
        "-m",
        "sglang",
        "--api-key",
        "***",
        "--hf-token=***",
        "--max-total-tokens",
        "64",
    ]


def test_the_closest_lines_of_a_failed_match_are_sent_redacted() -> None:
    from agent.proposer.briefing.prompt import repair

    text = repair("match", f'The closest lines of settings.py:\n1\tapi_key = "{TRACKED_KEY}"', 2)
    assert TRACKED_KEY not in text and 'api_key = "***"' in text
