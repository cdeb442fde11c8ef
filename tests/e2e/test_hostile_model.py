"""A hostile model, a whole session (docs/SECURITY.md, findings 1 and 2): the real CLI on the CPU
demo target, the scripted model over real HTTP. Its first answer hides a shell command behind a
terminal escape in its patch, its second sets `--hos 0.0.0.0` (argparse's prefix of `--host`);
neither is kept, each is sent back to the model as an error it can act on, and the session goes on
to its third answer (the real fix), which waits for approval. Cheap: one look, no candidate
launched (the model's patches wait for approval by default)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import git, last_json, perfloop, write_target
from tests.llm.conftest import BACKEND, NEW, fix_answer
from tests.llm.fake_openai import ScriptedModel, Step, reply
from tests.procs import processes_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

KEY = "sk-perfloop-test-0123456789abcdef"
HIDDEN = NEW.replace(
    "            kv = k_buffer",
    "            __import__('os').system('touch PWNED')  # \x1b[2K\x1b[1A\n            kv = k_buffer",
)


def test_a_hostile_model_keeps_neither_hidden_code_nor_a_prefixed_flag(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    target.write_text(target.read_text() + "\n[proposer]\nlaunch_options = true\n")
    script: list[Step] = [
        reply(fix_answer(new=HIDDEN)),
        reply("The server should take requests from the benchmark host.\nLAUNCH: set --hos 0.0.0.0\n"),
        reply(fix_answer()),
    ]
    head = git(repo, "rev-parse", "HEAD")
    try:
        with ScriptedModel(script) as model:
            env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": KEY}
            args = (
                "--proposer",
                "llm",
                "--model",
                "scripted",
                "--no-builtin-playbooks",
                "--max-iterations",
                "1",
            )
            proc = perfloop(home, "run", "--approve", "auto", str(target), *args, "--json", env=env)
    finally:
        for pid in processes_in(tmp_path):  # the paused session's servers
            os.kill(pid, 9)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    assert s["status"] == "paused", s
    assert len(model.requests) == 3
    told = [r["messages"][-1]["content"] for r in model.requests[1:]]
    assert "patch gate" in told[0] and f"{BACKEND} line" in told[0] and "U+001B" in told[0], told[0]
    assert "--hos is a prefix of --host" in told[1], told[1]
    # The proposal waiting for approval is the third answer: the fix, no launch change.
    assert (
        "gather the request's rows" in proc.stderr and "PWNED" not in proc.stderr
    )  # --json: the view on stderr
    assert "files touched: " + BACKEND in proc.stderr and "runs now" not in proc.stderr
    assert git(repo, "rev-parse", "HEAD") == head and not (repo / "PWNED").exists()
    assert "PWNED" not in git(repo, "diff")
