"""A/A evidence from launches a session makes anyway (agent/decision/arms/aalaunches.py): alternating
arms' replicate launches kept per tree and session, and one sequential A/A launch at the baseline
while the store holds no measured launch noise; servers and measurements from a script, the A/A
store for real."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.decision.arms.aalaunches import Side, aa_launch, keep_replicates, replicate_samples, wants_launch
from agent.decision.arms.measuring import keep_aa, measure_arm
from agent.decision.stats.noise import launch_noise, pooled_sd, sample_group, target_key
from state.config.options import LoopOptions
from state.door.calls import Done, PairResult, ServerStatus
from state.measurement.aa import AARecordArgs, AASample
from state.measurement.arms import LaunchLocation
from state.measurement.decision import LaunchNoise
from state.measurement.measure import Measurement
from state.sessions.loop import LoopState
from tests.unit.aa_door import ScriptedDoor, handle, measurement, runtime_of, session
from tools.store import aa


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def alternating_launches(
    ref: list[float], cand: list[float]
) -> tuple[list[LaunchLocation], dict[Side, list[Measurement]]]:
    """Launch locations, the candidate's then the reference's, numbered from 2; each arm's
    measurements with its tree's content."""
    per_launch: list[LaunchLocation] = []
    arms: dict[Side, list[Measurement]] = {"reference": [], "candidate": []}
    n = 2
    sides: tuple[tuple[Side, list[float]], ...] = (("candidate", cand), ("reference", ref))
    for arm, locs in sides:
        for loc in locs:
            per_launch.append(LaunchLocation(arm=arm, launch_number=n, location_log=loc))
            arms[arm].append(
                measurement(f"{arm}-{n}", 10.0).model_copy(update={"content_sha256": arm.upper()})
            )
            n += 1
    return per_launch, arms


def test_replicate_launches_are_compared_only_within_their_tree_and_session(tmp_path: Path) -> None:
    """Each tree launched at least twice gives one sample per launch, grouped by tree and session: a
    shift between two sessions' launches of the same tree is not launch noise and is not counted;
    a tree launched once adds nothing."""
    s1, s2 = session(tmp_path, "s1"), session(tmp_path, "s2")
    per_launch, arms = alternating_launches(ref=[1.00, 1.02], cand=[0.90, 0.91, 0.95])
    one = replicate_samples(s1, per_launch, arms)
    assert sorted((s.launch_number, s.location_log) for s in one) == [
        (2, 0.90), (3, 0.91), (4, 0.95), (5, 1.00), (6, 1.02),
    ]  # fmt: skip
    assert {s.session_id for s in one} == {"s1"} and all(s.shift_log is None for s in one)
    assert len({s.group for s in one}) == 2 and one[0].target_key == target_key(s1.target)
    client, ref1 = arms["reference"][0].client, next(s for s in one if s.launch_number == 5)
    assert ref1.requests == 6 and ref1.group != sample_group("REFERENCE", s1.target, client)
    per2, arms2 = alternating_launches(ref=[2.00, 2.02], cand=[])
    two = replicate_samples(s2, per2, arms2)
    assert len(two) == 2 and two[0].group != ref1.group  # the same tree in another session
    sd, df = pooled_sd(one + two)
    groups = ([0.90, 0.91, 0.95], [1.00, 1.02], [2.00, 2.02])
    ss = sum((x - sum(g) / len(g)) ** 2 for g in groups for x in g)
    assert df == 4 and sd == pytest.approx(math.sqrt(ss / 4))  # never the 1.0 between the sessions
    lonely, lonely_arms = alternating_launches(ref=[1.0], cand=[0.9])
    assert replicate_samples(s1, lonely, lonely_arms) == []


def test_replicates_kept_through_the_door_once_even_when_a_resumed_step_keeps_them_again(
    tmp_path: Path,
) -> None:
    """One `aa.record` call keeps every replicate; a resumed step keeping the same launches again
    replaces them (same session and launch numbers); a state recorded before (no `aa_evidence`)
    keeps nothing and calls nothing, as it ran."""
    state = session(tmp_path)
    per_launch, arms = alternating_launches(ref=[1.00, 1.02], cand=[0.90, 0.93])
    door = ScriptedDoor({})
    assert keep_replicates(state, runtime_of(door), per_launch, arms) == 4
    assert keep_replicates(state, runtime_of(door), per_launch, arms) == 4
    assert door.names() == ["aa.record", "aa.record"]
    stored = aa.record(AARecordArgs(target_key=target_key(state.target))).samples
    assert sorted(s.launch_number for s in stored) == [2, 3, 4, 5]
    noise = launch_noise(stored, state.target.decide)
    assert noise.df == 2 and noise.launches == 4  # two trees, two launches each: 1 df each
    legacy = session(tmp_path, "s0", aa_evidence=False)
    quiet = ScriptedDoor({})
    assert keep_replicates(legacy, runtime_of(quiet), per_launch, arms) == 0 and quiet.calls == []


def single(session_id: str, number: int, group: str, loc: float) -> AASample:
    return AASample(
        target_key="k", group=group, session_id=session_id, launch_number=number, location_log=loc, requests=6
    )


def test_the_sequential_aa_launch_is_wanted_only_while_no_launch_noise_is_measured(tmp_path: Path) -> None:
    state = session(tmp_path, arms="sequential", auto_aa_pairs=1)
    base = single("s1", 1, "g1", 1.0)
    assert wants_launch(state, [base], 1)  # the store holds nothing else
    # a resumed step: its own earlier A/A launch (#2) is not evidence, it is about to be replaced
    assert wants_launch(state, [base, single("s1", 2, "g1", 1.01)], 1)
    measured = [single("s0", i, "g0", 1.0 + 0.01 * (i % 2)) for i in range(1, 7)]  # 6 launches, 5 df
    assert launch_noise(measured, state.target.decide).source == "aa"
    assert not wants_launch(state, [*measured, base], 1)
    assert wants_launch(state, [*measured[:4], base], 1)  # 5 launches: still the default
    pairs = [s.model_copy(update={"shift_log": 0.01, "beside": 1}) for s in measured]
    assert wants_launch(state, [*pairs, base], 1)  # interleaved pairs are not sequential noise
    for off in (
        session(tmp_path, arms="sequential", auto_aa_pairs=0),
        session(tmp_path, arms="interleaved", auto_aa_pairs=3),
        session(tmp_path, arms="alternating", auto_aa_pairs=3),
        session(tmp_path, arms="auto", auto_aa_pairs=3).model_copy(update={"arms": None}),
        session(tmp_path, arms="sequential", auto_aa_pairs=3, aa_evidence=False),
    ):
        assert not wants_launch(off, [base], 1), off.target.decide.arms


def baseline_of(state: LoopState, door: ScriptedDoor) -> tuple[LoopState, Measurement]:
    """The baseline step's first part: launch #1 running, measured and kept."""
    state = state.model_copy(update={"server": handle(1), "launches": 1})
    door.running.add(1)
    m = measure_arm(state, runtime_of(door), "baseline", 3, warm_up=True)
    return state, m


def test_a_sequential_baseline_launches_its_tree_once_more_and_keeps_both(tmp_path: Path) -> None:
    """With nothing stored: the baseline server stopped, the same tree launched as #2 and measured
    alike (its server runs on, its measurement is the baseline), both kept; the note gives the
    shift between them. A later session finds the two and still launches (5 more are needed)."""
    state = session(tmp_path, arms="sequential", auto_aa_pairs=1)
    door = ScriptedDoor({1: 10.0, 2: 11.0})
    state, m = baseline_of(state, door)
    rt = runtime_of(door)
    b = aa_launch(state, rt, m, keep_aa(state, rt, m), 3)
    assert door.names() == [
        "bench.measure", "repo.snapshot", "aa.record", "server.stop", "repo.snapshot", "server.launch",
        "bench.measure", "repo.snapshot", "aa.record",
    ]  # fmt: skip
    assert b.state.server is not None and b.state.server.launch_number == 2 and b.state.launches == 2
    assert door.running == {2} and b.measurement.label == "baseline-aa"
    assert b.measurement.tpot_ms.median == pytest.approx(11.0) and len(b.measurement.requests) == 6
    shift = math.log(10.0) - math.log(11.0)
    assert b.note == (
        f"1 A/A launch of the baseline tree (#1 -> #2: shift {shift:+.1%}; no measured launch noise "
        "of this target on this host was stored); "
    )
    assert b.noise.launches == 2 and b.noise.df == 1 and b.noise.source == "default"
    assert b.noise.estimate_log == pytest.approx(abs(shift) / math.sqrt(2))
    stored = aa.record(AARecordArgs(target_key=target_key(state.target))).samples
    assert [(s.session_id, s.launch_number) for s in stored] == [("s1", 1), ("s1", 2)]
    assert stored[0].group == stored[1].group  # the same tree: compared as A/A


def test_no_aa_launch_where_the_store_has_measured_noise_or_it_is_off(tmp_path: Path) -> None:
    state = session(tmp_path, arms="sequential", auto_aa_pairs=1)
    key = target_key(state.target)
    for i in range(1, 7):  # another session's six launches of one tree: measured noise
        sample = single("s0", i, "g0", 2.0 + 0.01 * (i % 2)).model_copy(update={"target_key": key})
        aa.record(AARecordArgs(target_key=key, sample=sample))
    door = ScriptedDoor({1: 10.0})
    state, m = baseline_of(state, door)
    rt = runtime_of(door)
    b = aa_launch(state, rt, m, keep_aa(state, rt, m), 3)
    assert b.note == "" and b.state is state and b.measurement is m and door.running == {1}
    assert "server.launch" not in door.names() and b.noise.source == "aa" and b.noise.launches == 7
    off = session(tmp_path, "s2", arms="sequential", auto_aa_pairs=0)
    door2 = ScriptedDoor({1: 10.0})
    off, m2 = baseline_of(off, door2)
    assert aa_launch(off, runtime_of(door2), m2, [], 3).note == ""
    assert "server.launch" not in door2.names()


def test_options_recorded_before_carry_no_aa_evidence_nor_reference_host_reads() -> None:
    """States recorded before carry no `aa_evidence` (nor `reference_host_aa`): they replay without
    the new launches, samples and reads; a new session's options have them."""
    from agent.cli.commands.flags import options as _options

    old = LoopOptions.model_validate({"session_dir": "/x", "python": "p"})
    assert old.aa_evidence is False and old.reference_host_aa is False and old.short_aa_pairs is False
    new = _options("auto", "patch", 1, [], False)
    assert new["aa_evidence"] is True and new["reference_host_aa"] is True and new["short_aa_pairs"] is True


class BesideDoor(ScriptedDoor):
    """ScriptedDoor with a second server beside the first and interleaved pairs measured: launch n
    at `tpot_ms[n]`, `repeats` requests per prompt as asked."""

    def answer(self, name: str, args: Any, fn: Callable[[Any], Any]) -> Any:
        if name == "server.launch":
            self.running.add(args.launch_number)
            return handle(args.launch_number)
        if name == "bench.measure_pair":
            arms = [
                measurement(a.label, self.tpot_ms[n], len(a.config.prompts), a.config.repeats)
                for a, n in ((args.reference, 1), (args.candidate, 2))
            ]
            return PairResult(reference=arms[0], candidate=arms[1])
        if name == "server.stop_recorded":
            self.running.discard(2)
            return ServerStatus(alive=False, healthy=False)
        if name == "repo.remove_reference_copy":
            return Done()
        return super().answer(name, args, fn)


@pytest.mark.parametrize("short", [True, False])
def test_a_pair_beside_the_baseline_measures_one_looks_requests(tmp_path: Path, short: bool) -> None:
    """A new session's A/A pair beside the baseline asks `repeats` requests per prompt of each
    launch (its shift is the launch's: more requests on the same two launches do not reduce it);
    a session recorded before `short_aa_pairs` asks the reference's whole budget, as it ran."""
    from agent.decision.calibration.autoaa import start_pairs

    state = session(tmp_path, arms="interleaved", auto_aa_pairs=1, looks=3)
    state = state.model_copy(update={"options": state.options.model_copy(update={"short_aa_pairs": short})})
    door = BesideDoor({1: 10.0, 2: 10.2})
    state, _ = baseline_of(state, door)
    before = state.launches
    after, noise, arms, shifts = start_pairs(state, runtime_of(door), LaunchNoise(sigma_log=0.05), 1.0)
    (pair,) = [a for n, a in door.calls if n == "bench.measure_pair"]
    reps = state.target.measure.repeats * (1 if short else 3)
    assert (pair.reference.config.repeats, pair.candidate.config.repeats) == (reps, reps)
    assert after.launches == before + 1 and door.running == {1} and len(arms) == 2
    assert shifts == [f"{math.log(10.0) - math.log(10.2):+.1%}"] and noise.paired
