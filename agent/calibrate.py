"""`perfloop calibrate`: launch the target's tree N times on purpose, each launch an A/A sample.

Each launch is measured like a baseline (warm-ups discarded, `repeats x looks` requests per prompt)
and kept in the A/A store (`aa_launches` in the session store) under the target and host; the
loop's baselines add to the same store. Every call goes through a recording door, under a session
id of its own (`calibrate-...`), like a loop session's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from langgraph.runtime import Runtime

from agent.actions import start_server
from agent.context import LoopContext, call
from agent.measuring import budget, measure_arm, record_aa
from state.calls import ServerArgs
from state.decision import LaunchNoise
from state.loop import LoopOptions, LoopState
from state.target import TargetConfig
from tools import server
from tools.door import Door


def calibrate(
    door: Door,
    target: TargetConfig,
    session_id: str,
    session_dir: Path,
    python: str,
    launches: int,
    report: Callable[[str], None],
) -> LaunchNoise:
    """Launch, measure, keep, stop, `launches` times; the launch noise afterwards."""
    opts = LoopOptions(session_dir=session_dir, python=python, decision_rule="ci-v1")
    state = LoopState(session_id=session_id, target=target, options=opts)
    runtime = Runtime(context=LoopContext(door=door))
    door.node = "calibrate"
    noise = LaunchNoise(sigma_log=target.decide.default_launch_noise)
    for _ in range(launches):
        handle = start_server(state, runtime, instrumented=False)
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
    return noise
