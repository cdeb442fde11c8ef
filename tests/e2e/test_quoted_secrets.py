"""A key a starting server prints is masked in the progress line that quotes its log, on a real
terminal (tmux; every byte written to it recorded with `pipe-pane`, the status line's redraws
included) and on a captured stderr (timestamped lines), and the fix is still kept (issue 50).

The launch prints a value handed to it through `launch.pass_env` (an innocent name: masked because
pass_env registered it) and a GitHub-shaped token from `launch.env` (masked by its shape), then
waits 4 s, so that line is the log's last while perfloop waits for health (longer than the plain
lines' 3 s gap). The session runs on the terminal until SIGTERM at `measure` (its launches #1 and
#2 quoted there), then resumes with stderr captured (the candidate launched again, as #3: a
resume numbers its launches past the cut attempt's, issue 63 item 8).
"""

from __future__ import annotations

import secrets
import shlex
from pathlib import Path

import pytest

from tests.e2e.conftest import PERFLOOP, kept_unless_drifted, last_json, make_repo, perfloop, write_target
from tests.integration.test_hostile_patch import Tmux

pytestmark = pytest.mark.e2e
CAST_FIX = "kv-cache-full-pool-cast"
MASKED = "config: key=*** hub=***"


def test_a_key_the_starting_server_prints_is_masked_on_a_terminal_and_in_a_log(tmp_path: Path) -> None:
    passed, token = "planted-" + secrets.token_hex(8), "ghp_" + secrets.token_hex(12)
    repo, home, faults = make_repo(tmp_path / "engine"), tmp_path / "home", tmp_path / "faults"
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    target.write_text(
        target.read_text()
        .replace(
            'argv = ["bash", "launch.sh",',
            'pass_env = ["PERFLOOP_TEST_PASSED"]\nargv = ["bash", "-c", "echo \\"config: key=$PERFLOOP_TEST_PASSED '
            'hub=$ENGINE_HUB\\"; sleep 4; exec bash launch.sh \\"$@\\"", "launch",',
        )
        .replace(
            'env = { PYTHON = "{python}" }', f'env = {{ PYTHON = "{{python}}", ENGINE_HUB = "{token}" }}'
        )
    )
    faults.write_text("node:measure TERM\n")
    env = {"PERFLOOP_HOME": str(home), "PERFLOOP_TEST_PASSED": passed, "PERFLOOP_FAULTS_FILE": str(faults)}
    term, raw = Tmux({**env, "TERM": "xterm-256color"}), tmp_path / "terminal.bytes"
    try:
        term._tmux("pipe-pane", "-o", "-t", "t", f"cat >> {shlex.quote(str(raw))}")
        pane = term.run(
            f"{PERFLOOP} run {shlex.quote(str(target))} --max-iterations 1 --approve auto; echo exit=$?"
        )
    finally:
        term.close()
    assert "exit=143" in pane and faults.read_text() == "", pane
    session = last_json(perfloop(home, "sessions", "--json"))[0]["id"]
    done = perfloop(home, "resume", session, "--json", env={**env, "PERFLOOP_PROGRESS": "plain"})
    assert done.returncode == 0, done.stderr[-3000:]
    shown = {"terminal": raw.read_bytes().decode(errors="replace"), "captured": done.stdout + done.stderr}
    keys = {"pass_env": passed, "env": token}
    assert [(out, key) for out, text in shown.items() for key, value in keys.items() if value in text] == []
    assert "launch #2: waiting for" in shown["terminal"] and MASKED in shown["terminal"]  # quoted, masked
    assert "launch #3: waiting for" in done.stderr and MASKED in done.stderr, done.stderr[-3000:]
    assert "launch #2" not in done.stderr and "(again)" not in done.stderr, done.stderr[-3000:]
    s = last_json(done)
    assert s["status"] == "done"
    if kept_unless_drifted(s["accepted"] == [CAST_FIX], s["decision"]):
        assert s["outputs_identical"] is True
