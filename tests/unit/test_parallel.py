"""Parallel candidates, the pure parts: who is sent where, the join, and per-branch replay."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from agent.cli.target import load_target
from agent.steps.fanout import fan_out, settle
from state.config.options import LoopOptions
from state.config.target import TargetConfig, TrialHost
from state.measurement.trials import Trial
from state.sessions.loop import LoopState, Proposal
from tests.e2e.conftest import make_repo, perfloop, write_target
from tests.recorders import MemoryRecorder
from tools.door import tool
from tools.door.live import LiveDoor
from tools.door.replay import ReplayDivergence, ReplayDoor

DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def proposal(pid: str) -> Proposal:
    return Proposal(
        iteration=1,
        source=pid,
        title=pid,
        explanation="",
        diff="",
        files=[],
        expected_gain_share=0.5,
        expected_gain_ms=None,
        evidence=[],
    )


def state(tmp_path: Path, hosts: int = 2, parallel: int | None = None, **fields) -> LoopState:
    target = load_target(DEMO_TOML).model_copy(
        update={"hosts": [TrialHost(name=n, repo=tmp_path / n) for n in "abc"[:hosts]]}
    )
    opts = LoopOptions(session_dir=tmp_path, python="python3", parallel=parallel)
    return LoopState(session_id="s1", target=target, options=opts, **fields)


def trial(pid: str, host: str, status: str = "measured", verdict: str = "rejected", speedup=None, attempt=1):
    return Trial(
        iteration=1,
        playbook=pid,
        host=host,
        attempt=attempt,
        status=status,
        verdict=verdict,
        reason=f"{status} {verdict}",
        speedup=speedup,
        ci=[1.0, 2.0] if speedup else None,
    )


def test_fan_out_sends_one_candidate_per_host_up_to_parallel(tmp_path: Path) -> None:
    props = [proposal(p) for p in ("p1", "p2", "p3")]
    sends, update = fan_out(state(tmp_path), props)
    assert [(s.arg.proposal.source, s.arg.host.name) for s in sends] == [("p1", "a"), ("p2", "b")]
    assert update["trial_queue"] == ["p3"]
    sends, update = fan_out(state(tmp_path, parallel=1), props)
    assert [(s.arg.proposal.source, s.arg.host.name) for s in sends] == [("p1", "a")]
    assert update["trial_queue"] == ["p2", "p3"]


def test_a_failed_host_gets_no_more_work_and_its_candidate_is_retried_elsewhere(tmp_path: Path) -> None:
    props = [proposal(p) for p in ("p1", "p2", "p3")]
    s = state(
        tmp_path,
        candidates=props,
        trial_queue=["p3"],
        trials=[trial("p1", "a", verdict="accepted", speedup=3.0), trial("p2", "b", status="host-failed")],
    )
    plan = settle(s)
    assert [(x.arg.proposal.source, x.arg.host.name, x.arg.attempt) for x in plan.sends] == [("p2", "a", 2)]
    assert plan.queue == ["p3"] and plan.winner is None


def test_join_keeps_the_fastest_accepted_and_decides_the_rest(tmp_path: Path) -> None:
    props = [proposal(p) for p in ("p1", "p2", "p3", "p4")]
    trials = [
        trial("p1", "a", verdict="accepted", speedup=1.5),
        trial("p2", "b", verdict="accepted", speedup=3.0),
        trial("p3", "a", status="host-failed"),
        trial("p3", "b", status="host-failed", attempt=2),
        trial("p4", "c", verdict="regression", speedup=0.5),
    ]
    plan = settle(state(tmp_path, hosts=3, candidates=props, trials=trials))
    assert plan.sends == [] and plan.winner is not None and plan.winner.source == "p2"
    decided = {d.source: d for d in plan.decisions}
    assert set(decided) == {"p3", "p4"}  # p1 was good too: left for the next iteration
    assert decided["p3"].verdict == "failed" and decided["p3"].reason.startswith("trial dropped after")
    assert decided["p4"].verdict == "regression"
    assert "keep p2 (3.00x on b)" in plan.note and "failed host(s): a, b" in plan.note


def test_host_names_must_differ() -> None:
    with pytest.raises(ValueError, match="a appears more than once"):
        TargetConfig.model_validate(
            {
                **load_target(DEMO_TOML).model_dump(),
                "hosts": [{"name": "a", "repo": "/x"}, {"name": "a", "repo": "/y"}],
            }
        )


class Num(BaseModel):
    n: int


@tool("test.echo")
def echo(args: Num) -> Num:
    return Num(n=args.n)


def test_replay_matches_each_branch_in_its_own_order() -> None:
    rec = MemoryRecorder()
    live = LiveDoor("s1", rec)
    a, b = live.branch("trial@a", None), live.branch("trial@b", None)
    live.node = "propose"
    live.call(echo, Num(n=0))
    a.call(echo, Num(n=1))
    b.call(echo, Num(n=10))
    a.call(echo, Num(n=2))
    b.call(echo, Num(n=11))
    assert [c.seq for c in rec.calls] == [0, 1, 2, 3, 4]

    replay = ReplayDoor("s1", rec.calls)
    replay.node = "propose"
    assert replay.call(echo, Num(n=0)).n == 0
    rb, ra = replay.branch("trial@b"), replay.branch("trial@a")
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda d=d, ns=ns: results.extend(d.call(echo, Num(n=n)).n for n in ns))
        for d, ns in ((rb, (10, 11)), (ra, (1, 2)))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [1, 2, 10, 11] and replay.unplayed() == []

    again = ReplayDoor("s1", rec.calls).branch("trial@a")
    with pytest.raises(
        ReplayDivergence, match=r"call #0 \(test.echo from node trial@a\) has different input"
    ):
        again.call(echo, Num(n=2))


def test_parallel_without_hosts_is_refused_in_one_line(tmp_path: Path) -> None:
    target = write_target(tmp_path / "t.toml", make_repo(tmp_path / "engine"))
    proc = perfloop(tmp_path / "home", "run", str(target), "--parallel", "2")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("needs [[hosts]] in " + str(target) + ": list the hosts to try candidates on")
    )
    assert not (tmp_path / "home" / "sessions").exists() or not any(
        (tmp_path / "home" / "sessions").iterdir()
    )


def test_an_answer_must_fit_a_batch_or_a_single_proposal() -> None:
    from agent.sessions.approving import batch_refusal

    batch = {"playbook": "p1, p2", "candidates": [{"playbook": "p1"}, {"playbook": "p2"}]}
    single = {"playbook": "p1"}
    assert batch_refusal("s1", batch, {"approved": True, "playbooks": ["p2"]}) is None
    assert batch_refusal("s1", batch, {"approved": False, "reason": "no"}) is None
    assert batch_refusal("s1", single, {"approved": True, "diff": "x"}) is None
    assert batch_refusal("s1", batch, {"approved": True, "playbooks": ["p2", "p9"]}) == (
        "--only p9: not in the batch; choose from p1, p2"
    )
    assert batch_refusal("s1", batch, {"approved": True, "diff": "x"}) == (
        "--patch: session s1 waits on a batch of 2 candidates for [[hosts]] (p1, p2), not one patch; "
        "approve (--only ID to pick) or reject the batch"
    )
    assert batch_refusal("s1", single, {"approved": True, "playbooks": ["p1"]}) == (
        "--only: session s1 waits on one proposal (p1), not a batch; leave --only out"
    )
