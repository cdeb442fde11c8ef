"""A parallel session SIGKILLed in the middle of a batch, after one trial finished and while the
other runs, then resumed: LangGraph keeps the finished trial's writes (the checkpoint's pending
writes) and runs only the other again; the finished trial's tool calls stay the recording of what
it did, so `perfloop replay` plays the finished session back. On SQLite and on Postgres.

Two local hosts, each with its own checkout of the demo target. Host b's `launch.sh` waits for a
gate file the test creates only after the kill, so b is still in its baseline launch when the
session is killed, however loaded the machine is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    PERFLOOP,
    edited_diff,
    git,
    kept_unless_untimed,
    last_json,
    make_repo,
    perfloop,
    playbook_variant,
    write_target,
)
from tests.pg import PgServer
from tests.procs import processes_in
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e
BACKEND = "mla_server/attention/mla_backend.py"


def gated(repo: Path, gate: Path) -> Path:
    """Host b's checkout: its launches wait until `gate` exists (committed, so the tree is clean)."""
    launch = repo / "launch.sh"
    text = launch.read_text().replace('exec "', f'while [ ! -e {gate} ]; do sleep 0.2; done\nexec "', 1)
    launch.write_text(text)
    git(repo, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qam", "launches wait for the gate")
    return repo


def with_local_hosts(target: Path, repos: dict[str, Path]) -> Path:
    """The target file with a `[[hosts]]` table per local checkout."""
    with target.open("a") as f:
        for name, r in repos.items():
            f.write(f'\n[[hosts]]\nname = "{name}"\nrepo = {json.dumps(str(r))}\n')
    return target


def noop_books(tmp_path: Path, repo: Path) -> Path:
    """A playbook folder with a comment-only patch proposed after the built-in one."""
    books = tmp_path / "books"
    noop = edited_diff(repo, tmp_path, {BACKEND: [("import torch\n", "import torch\n\n# a comment\n")]})
    playbook_variant(books, "noop-comment", 0.5, noop)
    return books


def by_node(calls: list, node: str) -> list:
    return [c for c in calls if c.node == node]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_parallel_session_killed_mid_batch_resumes_and_replays(
    store: str, tmp_path: Path, pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg_server.url(pg_server.new_db()) if store == "postgres" else ""
    monkeypatch.setenv("PERFLOOP_STORE", url)  # for the Sessions opened here, and every CLI run
    gate = tmp_path / "gate"
    repo = make_repo(tmp_path / "engine")
    repo_a, repo_b = make_repo(tmp_path / "a" / "engine"), gated(make_repo(tmp_path / "b" / "engine"), gate)
    books = noop_books(tmp_path, repo)  # noop-comment comes after the built-in one: it goes to host b
    target = with_local_hosts(write_target(tmp_path / "t.toml", repo, looks=1), {"a": repo_a, "b": repo_b})
    home = tmp_path / "home"
    env = {**os.environ, "PERFLOOP_HOME": str(home)}
    proc = subprocess.Popen(
        [str(PERFLOOP), "run", "--approve", "auto", str(target), "--json", "--playbooks", str(books), "--max-iterations", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        sid, finished = wait_for_a_finished_trial(home, proc)
        os.kill(proc.pid, signal.SIGKILL)  # a crash: only perfloop dies, b's launch is left waiting
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    recorded = SessionStore.open(home)
    before = recorded.tool_calls(sid, include_superseded=True)
    a_calls, b_calls = by_node(before, "trial@a"), by_node(before, "trial@b")
    assert a_calls[-1].name == "repo.leave_branch"  # host a's trial finished (checkout given back)
    assert "repo.leave_branch" not in [c.name for c in b_calls] and b_calls  # b's was under way
    assert {c.task_id for c in a_calls} == finished and len(finished) == 1
    assert not {c.task_id for c in b_calls} & finished

    gate.touch()
    resumed = perfloop(home, "resume", sid, "--json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    s = last_json(resumed)
    assert s["status"] == "done", s
    trials = last_json(perfloop(home, "show", sid, "--json"))["trials"]
    kept_unless_untimed(
        s["accepted"] == ["kv-cache-full-pool-cast"], next(t for t in trials if t["host"] == "a")
    )
    replayed = perfloop(home, "replay", sid, "--json")  # the finished session, played back
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    again = last_json(replayed)
    assert again.pop("matches_recording") is True and again.pop("worded_differently") == []
    assert again.pop("read_back") is False  # the first replay runs the graph
    assert again == s
    after = recorded.tool_calls(sid, include_superseded=True)
    current = {c.seq for c in recorded.tool_calls(sid)}
    # Host a's trial ran once: its calls are the same records, still current; b's killed attempt's
    # calls are superseded, and b's trial ran again to the end.
    assert by_node(after, "trial@a") == a_calls and all(c.seq in current for c in a_calls)
    assert all(c.seq not in current for c in b_calls)
    b_again = [c for c in by_node(after, "trial@b") if c.seq in current]
    assert b_again[-1].name == "repo.leave_branch" and b_again[0].seq > max(c.seq for c in before)
    shown = last_json(perfloop(home, "show", sid, "--json"))
    assert sorted((t["playbook"], t["host"], t["attempt"]) for t in shown["trials"]) == [
        ("kv-cache-full-pool-cast", "a", 1),
        ("noop-comment", "b", 1),
    ], shown["trials"]
    assert not [t for t in shown["trials"] if "left as it was" in t["reason"]], shown["trials"]
    for r in (repo, repo_a, repo_b):
        assert processes_in(r) == [], r  # b's waiting launch was stopped by its trial's re-run
    # b's re-run found the checkout on its trial branch, went back to main first and tidied up.
    assert [c.name for c in b_again][:2] == ["repo.snapshot", "repo.abandon_branch"]
    for r in (repo_a, repo_b):
        assert git(r, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
        assert git(r, "branch", "--list", "perfloop/*").strip() == ""


def wait_for_a_finished_trial(home: Path, proc: subprocess.Popen) -> tuple[str, set[str]]:
    """The session's id and its finished tasks, once a trial's writes are in the checkpoint
    store (LangGraph's pending writes, read through the public state snapshot)."""
    from agent.sessions.runner import Sessions

    store, sessions = None, None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if (home / "sessions.sqlite").exists() or os.environ.get("PERFLOOP_STORE"):
            store = store or SessionStore.open(home)
            listed = store.list_sessions()
            if listed:
                sessions = sessions or Sessions(home)
                # Trials only: right after the start, LangGraph's `__start__` task is a finished
                # task of the first checkpoint too (a kill then found a session with no calls).
                snap = sessions.graph.get_state(sessions.config(listed[0].id))
                trials = {t.id for t in snap.tasks if t.name == "trial"}
                if finished := sessions.finished_tasks(listed[0].id) & trials:
                    return listed[0].id, finished
        time.sleep(0.5)
    raise AssertionError("no trial finished in time")
