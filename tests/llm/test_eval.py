"""`perfloop eval proposer`: the scripted models' recorded eval (benchmarks/eval_scripted.py ran
them on the real CPU demo) scores the same when replayed offline through the real CLI, with no
model endpoint and no server; a score that does not match its recording fails the command."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.proposer.harness.evaluation import score, task_named
from agent.sessions.archive import import_session
from agent.sessions.runner import Sessions
from tests.e2e.conftest import perfloop

pytestmark = pytest.mark.timeout(300)

RECORDED = Path(__file__).resolve().parents[1] / "data" / "eval"
Row = tuple[bool, bool, bool | None, int, list[str]]
EXPECTED: dict[
    str, dict[str, Row]
] = {  # model: {task: (passed, applied, outputs identical, rounds, verdicts)}
    "scripted-fix": {
        "demo-cast": (True, True, True, 1, ["accepted"]),
        "demo-launch": (True, True, True, 1, ["accepted"]),
        "demo-port": (True, True, True, 1, ["accepted"]),
        "sglang-port": (True, True, True, 1, ["accepted"]),  # by the equivalence harness
    },
    "scripted-learner": {
        "demo-cast": (True, True, True, 2, ["rejected", "accepted"]),
        "demo-launch": (True, True, True, 2, ["failed", "accepted"]),  # a crash, then the fix
        "demo-port": (True, True, True, 1, ["accepted"]),  # the stored lines sent back, then the port
        "sglang-port": (True, True, True, 1, ["accepted"]),  # the same on sglang 0.5.9
    },
    "scripted-wrong": {
        "demo-cast": (False, True, False, 3, ["rejected", "failed", "failed"]),
        "demo-launch": (False, False, None, 3, ["failed", "failed", "failed"]),  # code off limits
        "demo-port": (False, False, None, 3, ["failed", "failed", "failed"]),  # matches nothing
        # a port that gathers the wrong rows: the harness sees the outputs change, then resent
        "sglang-port": (False, True, False, 3, ["rejected", "failed", "failed"]),
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_eval_replays_offline_with_the_same_scores(name: str, tmp_path: Path) -> None:
    proc = perfloop(tmp_path / "home", "eval", "proposer", "--replay", str(RECORDED / name), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "same scores as recorded" in proc.stderr
    scores = last_json_list(proc)
    assert [s["task"] for s in scores] == list(EXPECTED[name]) and {s["model"] for s in scores} == {name}
    for s in scores:
        passed, applied, identical, rounds, verdicts = EXPECTED[name][s["task"]]
        assert (s["passed"], s["applied"], s["outputs_identical"]) == (passed, applied, identical), s
        assert s["rounds"] == rounds and s["verdicts"] == verdicts, s
        assert s["tokens"] > 0 and s["calls"] >= rounds
        (task,) = task_named([s["task"]])
        if task.release is not None:  # a port to a real SGLang release: no GPU here, nothing timed
            assert s["speedup"] is None and s["speedup_ci"] is None, s
            assert s["speedup_note"] == "not measured (no GPU)", s
        elif passed:  # the kept fix's speedup by the CI rule
            low, high = s["speedup_ci"]
            assert s["speedup"] >= task.min_speedup and 1.0 < low <= s["speedup"] <= high, s
        else:  # the output gate refused it before any timing was judged, or nothing was launched
            assert s["speedup"] is None and s["speedup_ci"] is None, s
        assert s["task"] in proc.stdout
    assert name in proc.stdout  # the table


def last_json_list(proc: subprocess.CompletedProcess) -> list[dict]:
    value = json.loads(proc.stdout)  # `--json`: one document on stdout, the table on stderr
    assert isinstance(value, list), value
    return value


def test_a_score_that_differs_from_its_recording_fails(tmp_path: Path) -> None:
    """The recorded scores say the fixing model failed demo-cast: the replay scores it as passing,
    says so and exits 1 (only that row is kept: a replay scores the rows of scores.json)."""
    folder = tmp_path / "tampered"
    shutil.copytree(RECORDED / "scripted-fix", folder)
    data = json.loads((folder / "scores.json").read_text())
    data["scores"] = data["scores"][:1]
    data["scores"][0]["passed"] = False
    (folder / "scores.json").write_text(json.dumps(data))
    proc = perfloop(tmp_path / "home", "eval", "proposer", "--replay", str(folder), "--json")
    assert proc.returncode == 1 and "DIFFERENT scores than recorded" in proc.stderr, proc.stderr[-2000:]
    assert last_json_list(proc)[0]["passed"] is True


def test_bad_eval_input_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    cases = [
        (
            ("--model", "m", "--task", "nope"),
            "error: --task: no eval task 'nope'; the tasks are demo-cast, demo-launch, demo-port, sglang-port",
        ),
        ((), "error: --model is required"),
        (("--replay", str(tmp_path / "none")), "cannot read scores.json"),
        (("--model", "m", "--price-in", "1"), "--price-in and --price-out go together"),
    ]
    for args, line in cases:
        result = CliRunner().invoke(app, ["eval", "proposer", *args], env={"COLUMNS": "400"})
        assert result.exit_code == 2 and line in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_task_is_passed_only_by_a_fix_of_its_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded sessions replayed in this process: scripted-fix's kept code patch of demo-cast
    does not pass demo-launch (whose answer is a launch option), and its kept launch change of
    demo-launch does not pass demo-cast, though each is kept, identical and fast enough."""
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    sessions = Sessions()
    recorded = json.loads((RECORDED / "scripted-fix" / "scores.json").read_text())["scores"]
    cast, launch = task_named(["demo-cast", "demo-launch"])
    by_task = {s["task"]: s["session"] for s in recorded}
    for own, other in ((cast, launch), (launch, cast)):
        import_session(sessions.store, RECORDED / "scripted-fix" / f"{own.name}.json.gz")
        state, _ = sessions.replay(by_task[own.name])
        assert score(own, "scripted-fix", state, None).passed
        wrong_kind = score(other, "scripted-fix", state, None)
        assert not wrong_kind.passed and wrong_kind.speedup is not None
        assert wrong_kind.speedup >= other.min_speedup and wrong_kind.outputs_identical, wrong_kind


def first_messages(name: str, task: str) -> list[str]:
    """The first user message of each recorded model request of a task (and the key never there)."""
    raw = gzip.decompress((RECORDED / name / f"{task}.json.gz").read_bytes()).decode()
    assert "sk-scripted" not in raw  # the key the scripted runs were given
    calls = json.loads(raw)["tool_calls"]
    return [c["input"]["messages"][1]["content"] for c in calls if c["name"] == "llm.chat"]


def test_the_recorded_requests_say_what_the_task_needs() -> None:
    """demo-port quotes git's reason once; sglang-port gives the stored 0.5.23 patch to port, with
    why it does not fit 0.5.9; demo-launch (code off limits) asks for LAUNCH lines only."""
    (port, *_) = first_messages("scripted-fix", "demo-port")
    assert "failed: patch does not apply: mla_server/attention/mla_backend.py:" in port
    assert "patch does not apply: patch does not apply" not in port
    (sglang, *_) = first_messages("scripted-fix", "sglang-port")
    assert (
        "its stored patch does not fit this target (playbook does not fit sglang 0.5.9: hunk 2 failed"
        in sglang
    )
    stored = sglang.split('<data kind="patch-to-port">')[1].split("</data>")[0]
    assert "get_exec().kernel.flashinfer_mla_disable_ragged" in stored  # 0.5.23's code, not 0.5.9's
    assert "flashinfer_mla_backend.py:575 (forward_decode)" in sglang  # 0.5.9's own cast line
    (launch, *_) = first_messages("scripted-fix", "demo-launch")
    assert launch.endswith("The code is off limits here (every file is protected): read what you need, "
                           "then answer with your rationale and LAUNCH: lines.")  # fmt: skip
