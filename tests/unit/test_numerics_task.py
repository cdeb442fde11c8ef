"""The numerics gate's task check (agent/decision/gate/task.py) and its file (`[correctness] task`):
a paired interval on the accuracy difference, a task that cannot tell, and one-line errors before any
launch for a missing or malformed file or an engine without logprobs."""

from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.decision.gate import task
from state.measurement.numerics import TaskItem, read_task
from tools.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples/targets/mla_server.toml"


def items(n: int) -> list[TaskItem]:
    return [TaskItem(prompt=f"{i}+{i}=", answer=str(2 * i)) for i in range(n)]


def test_no_loss_is_kept_and_a_real_loss_is_refused_with_its_interval():
    qs = items(100)
    base = [f"it is {2 * i}." for i in range(80)] + ["no idea"] * 20  # 80/100
    same = list(base)
    ok, line = task.judge(qs, base, same, 0.02)
    assert ok and "80/100 right vs the baseline's 80/100" in line and "+0.000" in line
    worse = [("no" if i < 10 else t) for i, t in enumerate(base)]  # 10 lost
    ok, line = task.judge(qs, base, worse, 0.02)
    assert not ok and "70/100" in line and "beyond the margin" in line


def test_a_task_the_baseline_cannot_do_says_it_cannot_tell():
    qs = items(50)
    ok, line = task.judge(qs, ["?"] * 50, ["?"] * 50, 0.02)
    assert not ok and "too few for the task to tell anything" in line and "random weights" in line


def test_answers_count_right_ignoring_case_and_spaces():
    assert task.right("The  Answer 42", "so the answer 42, surely")
    assert not task.right("42", "forty-two")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": "a"}\n', 'line 1 needs "prompt" and "answer" strings'),
        ('{"prompt": "a", "answer": "b"}\nnot json\n', "line 2 is not JSON"),
        ("\n\n", "holds no questions"),
    ],
)
def test_a_malformed_task_file_names_its_line(text, message):
    with pytest.raises(ValueError, match=message):
        read_task(text)


def test_the_target_file_reads_its_task_or_says_in_one_line_what_is_wrong(tmp_path: Path):
    good = tmp_path / "qa.jsonl"
    good.write_text('{"prompt": "2+2=", "answer": "4"}\n{"prompt": "3+3=", "answer": "6"}\n')
    toml = tmp_path / "t.toml"
    toml.write_text(
        DEMO.read_text().replace("[correctness]", '[correctness]\npolicy = "numerics"\ntask = "qa.jsonl"', 1)
    )
    target = load_target(toml, repo=str(ROOT / "examples/targets/mla_server"))
    assert [q.answer for q in target.correctness.task_items] == ["4", "6"]
    assert target.correctness.task == str(good)
    good.unlink()
    with pytest.raises(ConfigError, match=r"\[correctness\] task .*qa.jsonl: cannot read it"):
        load_target(toml, repo=str(ROOT / "examples/targets/mla_server"))
    good.write_text('{"prompt": 1, "answer": "4"}\n')
    with pytest.raises(ConfigError, match='line 1 needs "prompt" and "answer"'):
        load_target(toml, repo=str(ROOT / "examples/targets/mla_server"))


def test_an_engine_without_logprobs_needs_the_exact_policy_before_any_launch(tmp_path: Path, monkeypatch):
    from tools.engines.demo import DemoEngine

    monkeypatch.setattr(DemoEngine, "logprobs", False)  # an engine of a user's that returns none
    toml = tmp_path / "t.toml"
    toml.write_text(DEMO.read_text().replace("[correctness]", '[correctness]\npolicy = "numerics"', 1))
    with pytest.raises(ConfigError, match='returns no completion logprobs.*policy = "exact"'):
        load_target(toml, repo=str(ROOT / "examples/targets/mla_server"))
    assert load_target(DEMO, repo=str(ROOT / "examples/targets/mla_server")).correctness.policy == "exact"
