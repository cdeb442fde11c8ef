"""The probe (`code.probe`) runs the model's code with a minimal environment: a real probe command
in a scratch worktree of a real git repo dumps its environment to a file; the store URL, every
variable named like a key, token, password, secret or credential, the SSH agent and any value
holding a URL's password are missing, while PATH, HOME and the locale are there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from state.proposers.llm_tools import ProbeArgs
from tools.llm.probe import run

NEW_FILE = "diff --git a/probe.txt b/probe.txt\nnew file mode 100644\n--- /dev/null\n+++ b/probe.txt\n@@ -0,0 +1 @@\n+x\n"
DUMP = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
HIDDEN = {
    "PERFLOOP_STORE": "postgresql://perfloop:store-pw-123@db.example/perfloop",
    "PERFLOOP_SERVE_TOKEN": "serve-token-0123456789",
    "OPENAI_API_KEY": "sk-probe-env-0123456789",
    "MY_SERVICE_TOKEN": "tok-0123456789",
    "DB_PASSWORD": "hunter2hunter2",
    "AWS_SECRET_ACCESS_KEY": "aws-0123456789",
    "GIT_CREDENTIALS": "https://u:p@github.com",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "SSH_AGENT_PID": "ssh-agent-pid-4242",
    "MIRROR_URL": "https://user:mirror-pw@mirror.example/simple",  # an innocent name, a password inside
    "UNRELATED_SETTING": "not-needed-by-a-probe",
}


def test_the_probe_gets_no_secret_and_no_store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@x", *args], check=True
        )
    for name, value in HIDDEN.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    dump = tmp_path / "env.json"
    result = run(
        ProbeArgs(repo=repo, diff=NEW_FILE, argv=[sys.executable, "-c", DUMP, str(dump)], timeout_s=60)
    )
    assert result.exit_code == 0, result.output
    env = json.loads(dump.read_text())
    leaked = sorted(set(HIDDEN) & set(env))
    assert leaked == [], leaked
    assert not any(value in json.dumps(env) for value in HIDDEN.values())
    assert env["PATH"] and env["HOME"] and env["LANG"] == "C.UTF-8" and env["CUDA_VISIBLE_DEVICES"] == "0"
