"""Model-written candidates tried at once: the real CLI on the CPU demo target with two local
`[[hosts]]` (each its own checkout) and the real openai client talking to a scripted
OpenAI-compatible server on 127.0.0.1. The model is asked for one candidate per host: the second
conversation is shown the first candidate and answers with a different patch (faster, wrong); both
are measured at the same time on their hosts, the verified one is applied and measured again here,
the wrong one's trial (its diff, where its outputs diverged) is kept for the model's next round,
and the session replays offline."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    assert_clean,
    git,
    kept_unless_untimed,
    last_json,
    make_repo,
    perfloop,
    write_target,
)
from tests.e2e.test_llm_proposer import MODEL_ONLY, llm_env, reads_then_answers
from tests.e2e.test_parallel_resume import with_local_hosts
from tests.llm.conftest import BACKEND, OLD, WRONG, edit_block, fix_answer
from tests.llm.fake_openai import ScriptedModel, reply
from tests.procs import processes_in
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e


def a_different_patch(body: dict) -> dict:
    """The second conversation: it was shown the first candidate, and answers with another change,
    faster and wrong (it attends to the last 4 KV rows only: outputs change on its host)."""
    context = body["messages"][1]["content"]
    assert "already proposed for this round" in context and "llm-1: Gather-then-cast" in context, context
    answer = "Cast only the newest rows instead.\n" + edit_block(BACKEND, OLD, WRONG)
    return {**reply(answer), "prompt_tokens": 1800, "completion_tokens": 60}


@pytest.mark.timeout(900)
def test_two_model_candidates_are_tried_at_once_on_two_hosts_then_replay(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "engine")
    repo_a, repo_b = make_repo(tmp_path / "a" / "engine"), make_repo(tmp_path / "b" / "engine")
    target = with_local_hosts(write_target(tmp_path / "t.toml", repo, looks=1), {"a": repo_a, "b": repo_b})
    with target.open("a") as f:  # host b's servers get their own variable (e.g. a GPU of their own)
        f.write('[hosts.env]\nPERFLOOP_TEST_GPU = "1"\n')
    home = tmp_path / "home"
    args = (*MODEL_ONLY, "--max-iterations", "1")
    with ScriptedModel([*reads_then_answers(fix_answer()), a_different_patch]) as model:
        proc = perfloop(home, "run", "--approve", "auto", str(target), *args, "--json", env=llm_env(model))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    trials = sorted((t["playbook"], t["host"], t["status"]) for t in shown["trials"])
    assert trials == [("llm-1", "a", "measured"), ("llm-2", "b", "measured")], shown["trials"]
    by_id = {t["playbook"]: t for t in shown["trials"]}
    assert by_id["llm-2"]["verdict"] == "rejected" and by_id["llm-2"]["speedup"] is None, by_id
    # kept, or inconclusive with no interval (beside two busy loops, once: 8.58x [0.00, 1e9], a
    # prompt's streams untimed on host a); then the loop asks the model again (the script exhausted)
    kept = kept_unless_untimed(s["accepted"] == ["llm-1"], by_id["llm-1"])
    assert s["status"] == "done", s
    if kept:
        assert (
            len(model.requests) == 3
            and s["outputs_identical"] is True
            and s["speedup"] >= 3.0
            and s["llm_calls"] == 3
        ), s
        assert by_id["llm-1"]["verdict"] == "accepted" and by_id["llm-1"]["speedup"] >= 2.0, by_id
        assert [d["playbook"] for d in shown["decisions"] if d["verdict"] == "accepted"] == ["llm-1"]
        assert len(shown["model_trials"]) == 1, shown["model_trials"]
    # what llm-2's trial on host b showed is kept for the model's next round, as on one host
    told = next(t for t in shown["model_trials"] if t["candidate"] == "llm-2")
    assert "kv_indices[-4:]" in told["diff"], told
    assert told["feedback"][0].startswith("rejected: trial on b: outputs"), told
    assert any(
        f.startswith("on b: prompt ") and "outputs diverge at character" in f for f in told["feedback"]
    )
    # the two trials overlapped in time: each host's trial began before the other's ended
    calls = SessionStore.open(home).tool_calls(s["session"])
    spans = {}
    for h in "ab":
        mine = [c for c in calls if c.node == f"trial@{h}"]
        end = max(c.started_at + timedelta(seconds=c.duration_s) for c in mine)
        spans[h] = (min(c.started_at for c in mine), end)
    assert spans["a"][0] < spans["b"][1] and spans["b"][0] < spans["a"][1], spans
    for h, gpu in (("a", None), ("b", "1")):  # [hosts.env] reached only that host's launches
        launches = [c for c in calls if c.node == f"trial@{h}" and c.name == "server.launch"]
        assert len(launches) == 2 and all(
            c.input["launch"]["env"].get("PERFLOOP_TEST_GPU") == gpu for c in launches
        )
    assert_clean(repo, s)
    for r in (repo, repo_a, repo_b):
        assert processes_in(r) == [], r
    for r in (repo_a, repo_b):  # each host's checkout given back as it was
        assert git(r, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
        assert git(r, "status", "--porcelain") == ""
    if not kept:  # the rest is the kept branch's and its replay
        return
    log = git(repo, "log", "-1", "--format=%B", s["branch"])  # the checkout given back: the kept branch
    assert "Perfloop-Proposer: llm scripted-coder" in log and "Perfloop-Playbook: llm-1" in log
    rep = perfloop(home, "replay", s["session"], "--json", env={"OPENAI_BASE_URL": model.base_url})
    assert rep.returncode == 0, rep.stderr[-2000:]
    again = last_json(rep)
    assert again.pop("matches_recording") is True and again.pop("worded_differently") == []
    assert again.pop("read_back") is False  # the first replay runs the graph
    assert again == s
