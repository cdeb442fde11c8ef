"""The target's probe (`[proposer.probe]`): the model runs it on its candidate through a real openai
client against the scripted server on 127.0.0.1; the command runs in a scratch git worktree of a
real checkout of the demo target, time-limited, its output bounded and redacted, recorded through
the door and answered from the recording on replay."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest

from agent.context import need
from agent.proposer.chat.conversation import Conversation, Outcome
from state.sessions.loop import LoopState
from tests.llm.conftest import BACKEND, NEW, OLD, edit_block, fix_answer, loop_state, runtime
from tests.llm.fake_openai import ScriptedModel, Step, call, last_tool_text, last_user_text, reply
from tools.door import Door
from tools.door.live import LiveDoor
from tools.door.replay import ReplayDoor
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.timeout(120)

KEY = "sk-perfloop-probe-0123456789abcdef"
LEAK = "sk-perfloop-leaked-9876543210fedcba"
WRONG = NEW.replace("k_buffer[kv_indices].to(q.dtype)", "k_buffer[kv_indices[-4:]].to(q.dtype)")
CHECK = """\
import os, pathlib, sys
src = pathlib.Path("mla_server/attention/mla_backend.py").read_text()
with open(sys.argv[1], "a") as ran:  # outside the tree: one line per run
    ran.write(os.getcwd() + "\\n")
pathlib.Path("probe-was-here.txt").write_text("x")  # inside the tree it runs in
print("endpoint key:", os.environ.get("OPENAI_API_KEY"))
print(f'token = "{sys.argv[2]}"')
print("user's change:", "# the user's own change" in pathlib.Path("mla_server/config.py").read_text())
print("instrumentation:", "perfloop-instrumentation" in src)
fixed = "kv = k_buffer[kv_indices].to(q.dtype)" in src
print("gather-then-cast" if fixed else "not the fix")
sys.exit(0 if fixed else 1)
"""


def converse(state: LoopState, door: Door) -> Outcome:
    """One proposal's conversation from `state`, through `door`."""
    finding = need(state.diagnosis, "diagnosis").findings[0]
    return Conversation(state, cast(Any, runtime(door)), finding).run()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def probe_cfg(tmp_path: Path, **extra) -> dict:
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    ran = tmp_path / "ran.txt"
    return {"argv": ["{python}", str(script), str(ran), LEAK], "timeout_s": 60, **extra}


def probes_then_fixes(seen: list[str]) -> list[Step]:
    """Probe the wrong patch (fails), then the fix (passes), then answer with the fix."""

    def second(body: dict) -> dict:
        seen.append(last_tool_text(body))
        return reply(None, call("run_probe", edits=edit_block(BACKEND, OLD, NEW)))

    def third(body: dict) -> dict:
        seen.append(last_tool_text(body))
        return reply(fix_answer())

    return [reply(None, call("run_probe", edits=edit_block(BACKEND, OLD, WRONG))), second, third]


def test_probe_runs_each_candidate_in_a_scratch_worktree_never_the_session_tree(
    tmp_path: Path, engine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two probe runs: the wrong patch fails the check, the fix passes; each ran in a worktree
    that is gone afterwards, holding the tree's uncommitted change and not its instrumentation
    line; the session tree, its status and its worktree list are untouched; the endpoint key is
    not in the command's environment and a key it prints is masked."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with open(engine / "mla_server/config.py", "a") as f:  # uncommitted, the patch will meet it
        f.write("# the user's own change\n")
    with open(engine / BACKEND, "a") as f:  # the profiler's, removed before a patch is applied
        f.write("_probe_seen = 1  # perfloop-instrumentation\n")
    before, status = (engine / BACKEND).read_text(), git(engine, "status", "--porcelain")
    store, seen = SessionStore(tmp_path / "sessions.sqlite"), list[str]()
    with ScriptedModel(probes_then_fixes(seen)) as model:
        state = loop_state(tmp_path, engine, model.base_url, probe=probe_cfg(tmp_path))
        state = state.model_copy(
            update={"options": state.options.model_copy(update={"python": sys.executable})}
        )
        outcome = converse(state, LiveDoor("s-llm", store))
    assert outcome.proposal is not None, outcome.reason
    assert "kv = k_buffer[kv_indices].to(q.dtype)" in outcome.proposal.diff
    wrong, fixed = seen
    assert (
        wrong.startswith("exit code 1 after") and "not the fix" in wrong and "(2 probe run(s) left)" in wrong
    )
    assert (
        fixed.startswith("exit code 0 after")
        and "gather-then-cast" in fixed
        and "(1 probe run(s) left)" in fixed
    )
    assert "user's change: True" in fixed and "instrumentation: False" in fixed
    assert "endpoint key: None" in fixed and LEAK not in fixed and 'token = "***"' in fixed
    tools = model.requests[0]["tools"]
    assert [t["function"]["name"] for t in tools] == ["read_file", "grep", "list_dir", "run_probe"]
    assert "check.py" in tools[-1]["function"]["description"]
    sent = json.dumps(model.requests)
    assert KEY not in sent and LEAK not in sent, [
        sent[max(0, sent.find(k) - 300) : sent.find(k) + 50] for k in (KEY, LEAK)
    ]
    runs = (tmp_path / "ran.txt").read_text().splitlines()
    assert len(runs) == 2 and all(Path(r) != engine.resolve() and not Path(r).exists() for r in runs), runs
    assert (engine / BACKEND).read_text() == before and git(engine, "status", "--porcelain") == status
    assert not (engine / "probe-was-here.txt").exists()
    assert git(engine, "worktree", "list", "--porcelain").count("worktree ") == 1
    probes = [c for c in store.tool_calls("s-llm") if c.name == "code.probe"]
    assert [c.output["exit_code"] for c in probes if c.output] == [1, 0]
    assert all(
        c.input["drop_env"] == ["OPENAI_API_KEY"] and c.input["argv"][0] == sys.executable for c in probes
    )


def test_probe_past_its_time_limit_is_killed_with_its_children(tmp_path: Path, engine: Path) -> None:
    """A probe that starts a child and sleeps: killed at its 1 s limit, the child too; the model
    is told, with the output so far; the worktree is removed."""
    pid_file = tmp_path / "child.pid"
    hang = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '120'])\n"
        "open(sys.argv[1], 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    seen: list[str] = []

    def after(body: dict) -> dict:
        seen.append(last_tool_text(body))
        return reply(fix_answer())

    script: list[Step] = [reply(None, call("run_probe", edits=edit_block(BACKEND, OLD, NEW))), after]
    cfg = {"argv": [sys.executable, "-c", hang, str(pid_file)], "timeout_s": 1}
    t0 = time.monotonic()
    with ScriptedModel(script) as model:
        state = loop_state(tmp_path, engine, model.base_url, probe=cfg)
        store = SessionStore(tmp_path / "sessions.sqlite")
        outcome = converse(state, LiveDoor("s-llm", store))
    assert time.monotonic() - t0 < 30
    assert outcome.proposal is not None, outcome.reason
    (told,) = seen
    assert told.startswith("the probe was killed at its time limit") and "started" in told, told
    assert "[killed after 1 s: the probe's time limit]" in told
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), f"the probe's child {child} outlived the time limit"
    assert git(engine, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(engine, "status", "--porcelain") == ""


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_probe_is_answered_from_the_recording_on_replay_without_running(tmp_path: Path, engine: Path) -> None:
    """The recorded session replays offline: the same proposal, every recorded call played, the
    probe's recorded output given to the model, and the command not run again (its run log keeps
    one line); the endpoint is gone by then."""
    seen: list[str] = []

    def answer(body: dict) -> dict:
        seen.append(last_tool_text(body))
        return reply(fix_answer())

    store = SessionStore(tmp_path / "sessions.sqlite")
    script: list[Step] = [reply(None, call("run_probe", edits=edit_block(BACKEND, OLD, NEW))), answer]
    with ScriptedModel(script) as model:
        state = loop_state(tmp_path, engine, model.base_url, probe=probe_cfg(tmp_path))
        live = converse(state, LiveDoor("s-llm", store))
    assert live.proposal is not None, live.reason
    assert "gather-then-cast" in seen[0]
    door = ReplayDoor("s-llm", store.tool_calls("s-llm"))
    replayed = converse(state, door)
    assert replayed.proposal is not None and replayed.proposal.diff == live.proposal.diff
    assert door.unplayed() == [] and door.position == len(store.tool_calls("s-llm"))
    assert len((tmp_path / "ran.txt").read_text().splitlines()) == 1


def test_text_protocol_probe_request(tmp_path: Path, engine: Path) -> None:
    """Through a server that refuses tool_choice (vLLM without its flags): the system prompt
    explains the PROBE message, and one answered with the probe's result."""
    seen: list[str] = []

    def probe(body: dict) -> dict:
        assert "first line is PROBE" in body["messages"][0]["content"] and "tools" not in body
        return reply("PROBE\n" + edit_block(BACKEND, OLD, NEW))

    def answer(body: dict) -> dict:
        seen.append(last_user_text(body))
        return reply(fix_answer())

    with ScriptedModel([probe, answer], like="vllm") as model:
        state = loop_state(tmp_path, engine, model.base_url, probe=probe_cfg(tmp_path))
        store = SessionStore(tmp_path / "sessions.sqlite")
        outcome = converse(state, LiveDoor("s-llm", store))
    assert outcome.proposal is not None, outcome.reason
    (told,) = seen
    assert told.startswith("run_probe {your edits}:\nexit code 0") and "gather-then-cast" in told, told
