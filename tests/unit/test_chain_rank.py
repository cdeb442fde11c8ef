"""`--proposer chain`'s ranking (agent/proposer/chain.py): predicted gain per launch-minute across
sources, the launch-minutes from the session's measured start-ups, unpredicted candidates last."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agent.proposer.chain import launch_minutes, rank
from agent.proposer.tuning.search import search_proposal
from state.sessions.loop import LoopState, Proposal
from tests.unit.test_search import ARGV, decided, state

CAST = "kv-cache-full-pool-cast"


def patch(source: str = CAST) -> Proposal:
    return Proposal(
        iteration=1,
        source=source,
        title=source,
        explanation="",
        diff="--- a/x\n+++ b/x\n",
        files=["x"],
        expected_gain_share=0.5,
        expected_gain_ms=None,
        evidence=[],
    )


def trial(s: LoopState) -> Proposal:
    p, _ = search_proposal(s)
    assert p is not None
    return p


def test_a_knob_the_finding_implicates_ties_with_its_patch_and_goes_first(tmp_path: Path) -> None:
    s = state(tmp_path, findings=(CAST,)).model_copy(update={"startups": {" ".join(ARGV): 3.0}})
    ranked = rank(s, [patch(), trial(s)])
    assert [r.proposal.source for r in ranked] == ["search-1", CAST]
    assert ranked[0].predicted == ranked[1].predicted == pytest.approx(2.0)  # share 0.5: 1 / (1 - 0.5)
    assert "implicates" in ranked[0].basis and ranked[1].basis == "expected share"
    # two interleaved launches of 3 s each
    assert ranked[0].minutes == ranked[1].minutes == pytest.approx(2 * 3.0 / 60)


def test_a_slow_launch_measured_in_the_session_costs_its_minutes(tmp_path: Path) -> None:
    s = state(tmp_path, findings=(CAST,))
    t = trial(s)
    assert t.launch_argv is not None
    slow = s.model_copy(update={"startups": {" ".join(ARGV): 3.0, " ".join(t.launch_argv): 300.0}})
    ranked = rank(slow, [patch(), t])
    assert [r.proposal.source for r in ranked] == [CAST, "search-1"]  # same gain, 100x the launch time
    assert ranked[1].minutes == pytest.approx(2 * 5.0)
    assert ranked[0].score == pytest.approx(math.log(2.0) / (2 * 3.0 / 60))
    # a command never launched costs the median of those measured
    assert launch_minutes(slow, ["bash", "launch.sh", "--other"]) == pytest.approx(2 * 151.5 / 60)


def test_interleaved_arms_cost_two_launches_per_candidate(tmp_path: Path) -> None:
    s = state(tmp_path, findings=(CAST,)).model_copy(update={"startups": {" ".join(ARGV): 6.0}})
    assert s.target.decide.arms == "interleaved"  # the search example's
    assert launch_minutes(s, ARGV) == pytest.approx(2 * 6.0 / 60)


def test_a_later_tpe_trial_has_no_prediction_and_follows_every_predicted_candidate(tmp_path: Path) -> None:
    first = decided(1, [*ARGV, "--max-total-tokens", "4096"], 10.0, "accepted")
    s = state(tmp_path, [first], findings=(CAST,))
    ranked = rank(s, [patch("other-playbook"), patch(), trial(s)])  # propose's order: playbooks, search
    # the predicted patch first; the unpredicted ones after it, the playbooks' before the search's
    assert [r.proposal.source for r in ranked] == [CAST, "other-playbook", "search-2"]
    assert ranked[0].predicted == pytest.approx(2.0)
    assert ranked[-1].predicted is None and ranked[-1].basis == "TPE trial" and ranked[-1].score is None


def test_the_summary_has_a_chain_only_under_chain_and_names_a_check_without_looks(tmp_path: Path) -> None:
    from agent.sessions.summary import chain_of
    from state.sessions.chain import Chain, ChainCheck, ChainLink

    kept = decided(1, [*ARGV, "--max-total-tokens", "4096"], 10.0, "accepted").model_copy(
        update={"tpot_ms_before": 40.0}
    )
    s = state(tmp_path, [kept], findings=(CAST,))
    assert s.target.proposer.mode != "chain" and chain_of(s) is None  # other modes: no chain field
    chained = s.model_copy(
        update={
            "target": s.target.model_copy(
                update={"proposer": s.target.proposer.model_copy(update={"mode": "chain"})}
            )
        }
    )
    got = chain_of(chained)
    assert got is not None and got.whole is None
    (link,) = got.links
    assert (
        link.kind == "launch option"
        and link.speedup is None
        and link.line() == "search-1 (launch option) (not timed)"
    )
    check = ChainCheck(
        launch_argv_before=ARGV,
        launch_argv_after=[*ARGV, "--max-total-tokens", "4096"],
        commit_before=None,
        tpot_ms_before=40.0,
        tpot_ms_after=None,
        judgement=None,
        problem="the final server failed: exit 1",
    )
    patch_link = ChainLink(
        source=CAST,
        kind="patch",
        tpot_ms_before=10.0,
        tpot_ms_after=2.0,
        speedup=5.0,
        ci=[2.0, 9.0],
        verdict="accepted",
    )
    line = Chain(links=[link, patch_link], whole=check).line()
    assert line == (
        "chain: search-1 (launch option) (not timed) -> kv-cache-full-pool-cast (patch) 5.00x [2.00, 9.00]; "
        "whole chain not judged: the final server failed: exit 1"
    )
