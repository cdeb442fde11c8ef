"""`perfloop calibrate`: launch the target's tree N times on purpose, each launch an A/A sample.

Each launch is measured like a baseline (warm-ups discarded, `repeats x looks` requests per prompt)
and kept in the A/A store (`aa_launches` in the session store) under the target and host; the
loop's baselines add to the same store. With interleaved arms each sample is a pair of launches
measured together. `[decide] arms = "auto"` is resolved as a session resolves it
(agent/decision/arms/arms.py: the target's `two_servers_fit`, else `host.memory_fit` on the first
launch, which then counts as the first A/A launch), and the samples are those the resolved arms
use (alternating arms: single launches). Every call goes through a recording door, under a
session id of its own (`calibrate-...`), like a loop session's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.decision.arms.arms import arms_in_use, arms_line, choose_arms
from agent.decision.arms.interleave import launch_beside, stop_reference
from agent.decision.arms.measuring import budget, measure_arm, record_aa
from agent.decision.calibration.autoaa import aa_pair
from agent.decision.stats.noise import pair_noise
from agent.serving import start_server
from state.config.options import LoopOptions
from state.config.target import TargetConfig
from state.door.calls import ServerArgs
from state.measurement.arms import ArmsInUse
from state.measurement.decision import LaunchNoise
from state.sessions.loop import LoopState
from tools import progress, server
from tools.door import Door


def calibrate(
    door: Door,
    target: TargetConfig,
    session_id: str,
    session_dir: Path,
    python: str,
    launches: int,
    report: Callable[[str], None],
) -> tuple[LaunchNoise, ArmsInUse]:
    """Launch, measure, keep, stop, `launches` times; the launch noise afterwards, and the arms it
    was calibrated for (`auto` resolved)."""
    opts = LoopOptions(session_dir=session_dir, python=python, decision_rule="ci-v1")
    state = LoopState(session_id=session_id, target=target, options=opts)
    runtime = Runtime(context=LoopContext(door=door))
    door.node = "calibrate"
    state = resolve_arms(state, runtime, report)
    arms = arms_in_use(state)
    if arms == "interleaved":
        return calibrate_pairs(state, runtime, launches, report), arms
    noise = LaunchNoise(sigma_log=target.decide.default_launch_noise)
    for _ in range(launches):
        handle = state.server or start_server(state, runtime, instrumented=False)
        state = state.model_copy(update={"server": handle, "launches": handle.launch_number})
        try:
            m = measure_arm(state, runtime, f"aa-{handle.launch_number}", budget(state), warm_up=True)
            noise = record_aa(state, runtime, m)
        finally:
            call(runtime, server.stop, ServerArgs(server=handle, grace_s=target.launch.stop_grace_s))
            state = state.model_copy(update={"server": None})
        report(
            f"launch {handle.launch_number}/{launches}: median TPOT {m.tpot_ms.median:.1f} ms "
            f"({len(m.requests)} requests); {noise.describe()}"
        )
    return noise, arms


def resolve_arms(state: LoopState, runtime: Runtime[LoopContext], report: Callable[[str], None]) -> LoopState:
    """`arms = "auto"` resolved as the baseline step does, said in one line; without the target's
    `two_servers_fit` on a first launch, left running in the state for the first sample."""
    cfg = state.target.decide
    if cfg.arms != "auto":
        return state
    if cfg.two_servers_fit is None:
        handle = start_server(state, runtime, instrumented=False)
        state = state.model_copy(update={"server": handle, "launches": handle.launch_number})
    try:
        choice = need(choose_arms(state, runtime), "arms")
    except BaseException:
        if state.server is not None:  # the first launch, not measured
            grace = state.target.launch.stop_grace_s
            call(runtime, server.stop, ServerArgs(server=state.server, grace_s=grace))
        raise
    unit = "pairs of launches" if choice.arms == "interleaved" else "single launches"
    report(f"{arms_line(choice)}: calibrating {choice.arms} arms ({unit})")
    return state.model_copy(update={"arms": choice})


def calibrate_pairs(
    state: LoopState, runtime: Runtime[LoopContext], pairs: int, report: Callable[[str], None]
) -> LaunchNoise:
    """Interleaved arms: launch the tree twice at once, measure both with requests alternating,
    keep the shift between them as an A/A pair; `pairs` times (each pair is two launches)."""
    target = state.target
    noise = pair_noise([], target.decide)
    for i in range(1, pairs + 1):
        first = state.server or start_server(state, runtime, instrumented=False)
        state = state.model_copy(update={"server": first, "launches": first.launch_number})
        progress.report(f"calibrating: pair {i}/{pairs}")
        try:
            second = launch_beside(
                state, runtime, target.repo, target.launch.argv, state.launches + 1, "reference-tree"
            )
            state = state.model_copy(update={"launches": second.launch_number})
            sample, noise, pair = aa_pair(state, runtime, first, second, f"aa-{i}")
        finally:
            call(runtime, server.stop, ServerArgs(server=first, grace_s=target.launch.stop_grace_s))
            state = state.model_copy(update={"server": None})
            stop_reference(state, runtime)
        report(
            f"pair {i}/{pairs}: median TPOT {pair.reference.tpot_ms.median:.1f} / "
            f"{pair.candidate.tpot_ms.median:.1f} ms, shift {sample.shift_log:+.3f}; {noise.describe()}"
        )
    return noise
