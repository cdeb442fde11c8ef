"""The LLM proposer end to end: the real CLI on the CPU demo target, the real openai client talking
over real sockets to a scripted OpenAI-compatible server on 127.0.0.1 (OPENAI_BASE_URL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import assert_clean, git, last_json, perfloop, write_target
from tests.llm.conftest import BACKEND, OLD, fix_answer
from tests.llm.fake_openai import ScriptedModel, call, last_tool_text, reply

pytestmark = pytest.mark.e2e

KEY = "sk-perfloop-test-0123456789abcdef"
MODEL_ONLY = (
    "--proposer",
    "llm",
    "--model",
    "scripted-coder",
    "--no-builtin-playbooks",
    "--llm-approve",
    "auto",
)
"""Every patch from the scripted model, applied unasked (model patches wait for approval by
default); no playbook loaded."""
WRONG = OLD.replace("k_buffer[kv_indices], causal", "k_buffer[kv_indices[-4:]].to(q.dtype), causal").replace(
    "get_key_buffer(layer_id).to(q.dtype)", "get_key_buffer(layer_id)"
)


def reads_then_answers(answer: str):
    """A model that reads the file the profile points at, then answers with `answer` (2710 tokens)."""

    def first(body: dict) -> dict:
        context = body["messages"][1]["content"]
        assert "aten::copy_" in context and "No playbook matched" in context, context[:2000]
        return {
            **reply(None, call("read_file", path=BACKEND)),
            "prompt_tokens": 1000,
            "completion_tokens": 10,
        }

    def second(body: dict) -> dict:
        assert "get_key_buffer(layer_id).to(q.dtype)" in last_tool_text(body)
        return {**reply(answer), "prompt_tokens": 1500, "completion_tokens": 200}

    return [first, second]


def llm_env(model: ScriptedModel) -> dict[str, str]:
    return {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": KEY}


def learns_from_its_first_trial():
    """Round 1: reads the backend, answers WRONG (faster, outputs change). Round 2: its request
    carries the WRONG diff and where outputs diverged; the model sends WRONG again (refused before
    any launch), then the fix."""

    def second_round(body: dict) -> dict:
        context = body["messages"][1]["content"]
        assert "Your earlier patches in this session were tried and not kept" in context, context[-3000:]
        assert "kv_indices[-4:]" in context and "outputs diverge at character" in context, context[-3000:]
        return {**reply(fix_answer(new=WRONG)), "prompt_tokens": 2000, "completion_tokens": 200}

    def refused(body: dict) -> dict:
        assert "not launched again" in body["messages"][-1]["content"]
        return {**reply(fix_answer()), "prompt_tokens": 2500, "completion_tokens": 200}

    return [*reads_then_answers(fix_answer(new=WRONG)), second_round, refused]


@pytest.mark.timeout(900)
def test_demo_model_learns_from_a_rejected_patch_then_replay_offline(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    """On the CPU demo server (the e2e workload, one look): the model's first patch changes outputs:
    rejected, rolled back, told to the model with its diff and the divergence; the same patch again
    costs no launch; the fix is kept, >= 3x; the session replays offline."""
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    with ScriptedModel(learns_from_its_first_trial()) as model:
        args = (*MODEL_ONLY, "--max-iterations", "1", "--json")
        proc = perfloop(home, "run", "--approve", "auto", str(target), *args, env=llm_env(model))
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    why = {k: s[k] for k in ("verdict", "decision", "output_gate", "stop_reason", "llm_calls", "speedup_ci")}
    assert s["status"] == "done" and s["accepted"] == ["llm"] and s["rejected"] == ["llm"], (why, s)
    assert s["speedup"] >= 3.0 and s["outputs_identical"] is True, s
    assert s["llm_calls"] == 4 and len(model.requests) == 4
    assert all(a == f"Bearer {KEY}" for a in model.auth)
    assert_clean(repo, s)
    log = git(repo, "log", "-1", "--format=%B", s["branch"])
    assert "Perfloop-Proposer: llm scripted-coder" in log and "Perfloop-Playbook: llm" in log
    assert "kv = k_buffer[kv_indices].to(q.dtype)" in git(repo, "show", s["branch"], "--", BACKEND)
    for f in home.rglob("*"):  # the key is never written anywhere (store, checkpoints, logs)
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    assert shown["llm_tokens"] == s["llm_tokens"] and shown["llm_usage"]["calls"] == 4
    assert [t["node"] for t in shown["transitions"]].count("relaunch") == 2  # the resubmission: none
    (tried,) = shown["model_trials"]
    assert tried["verdict"] == "rejected" and "kv_indices[-4:]" in tried["diff"]
    # the endpoint is gone: replay answers the model from the recording
    rep = perfloop(home, "replay", s["session"], "--json", env={"OPENAI_BASE_URL": model.base_url})
    assert rep.returncode == 0, rep.stderr[-2000:]
    replayed = last_json(rep)
    assert replayed["matches_recording"] is True and replayed["accepted"] == ["llm"]


def test_killed_mid_conversation_resumes_unpaid_then_the_output_gate_rejects_a_wrong_patch(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    """SIGKILL after the model's last answer: resume pays no model call twice. The patch (attend to
    the last rows only) is faster and wrong: measured, outputs differ, rolled back. The token budget
    is then spent: the loop stops cleanly, saying so."""
    target = write_target(tmp_path / "t.toml", repo, looks=1)  # rejected on its outputs, not timing
    faults = tmp_path / "faults.txt"
    faults.write_text("tool:code.read_texts\n")  # the first validation read, after both model calls
    args = (*MODEL_ONLY, "--llm-max-tokens", "2000")
    with ScriptedModel(reads_then_answers(fix_answer(new=WRONG))) as model:
        env = {**llm_env(model), "PERFLOOP_FAULTS_FILE": str(faults)}
        killed = perfloop(home, "run", "--approve", "auto", str(target), *args, "--json", env=env)
        assert killed.returncode == -9 and faults.read_text() == "", killed.stderr[-2000:]
        assert len(model.requests) == 2
        sid = last_json(perfloop(home, "sessions", "--json"))[0]["id"]
        proc = perfloop(home, "resume", sid, "--json", env=env)
        assert len(model.requests) == 2, "a recorded model call was made again"
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    assert s["accepted"] == [] and s["rejected"] == ["llm"] and s["llm_calls"] == 2, s
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    verdict = shown["decisions"][0]
    assert verdict["verdict"] == "rejected" and verdict["reason"].startswith("outputs changed"), verdict
    assert s["stop_reason"].endswith("token budget exhausted: 2710 of 2000 tokens spent"), s
    assert_clean(repo)
    assert git(repo, "status", "--porcelain") == ""
