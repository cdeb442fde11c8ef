"""Paired blocks' door work (sessions with `LoopOptions.paired_blocks`): the history pooled into
a trial's interval, the trial's plan from what a launch costs, and the trial's blocks kept for the
next trial. The statistics are agent/decision/stats/blocks.py's; the launches are alternating
arms' (agent/decision/arms/alternating.py), one block per round.

History lives in the A/A store (`aa.record`, through the door, so a replay reads what the session
read) under `noise.shape_key`: the engine on the host at the workload's shape, whatever the launch
flags, so every trial of a launch-option search adds to one estimate. Each block is kept as one
sample whose location is d / sqrt(2) (one launch's scale), grouped by session and trial: only a
trial's own blocks are compared with each other (a trial's effect is its group's mean). A block's
sample carries minus its candidate launch's number: the store keys samples by session and launch,
and that launch's own replicate sample keeps the plus.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from langgraph.runtime import Runtime

from agent.context import LoopContext, call
from agent.decision.stats.blocks import BlockPlan, Pool, cost, plan_blocks, pool_of
from agent.decision.stats.noise import launch_noise, shape_key
from state.measurement.aa import AARecordArgs, AASample
from state.measurement.arms import LaunchLocation
from state.measurement.measure import Measurement
from state.sessions.loop import LoopState
from tools.store import aa

_STAMPED = re.compile(r"\d{8}-\d{6}-[0-9a-f]{4}")


def history(state: LoopState, runtime: Runtime[LoopContext], leave_out: str | None = None) -> Pool:
    """The pool before a trial: earlier trials' blocks of this shape (the group `leave_out`, a
    resumed trial's own, left out) and the target's A/A launches, with the weak prior."""
    cfg = state.target.decide
    read = call(runtime, aa.record, AARecordArgs(target_key=shape_key(state.target)))
    groups: dict[str, list[float]] = defaultdict(list)
    for s in read.samples:
        if s.group != leave_out:
            groups[s.group].append(s.location_log)
    pool = pool_of(list(groups.values()), state.launch_noise or launch_noise([], cfg), cfg)
    return replace(pool, guard=False) if first_plan(state) else pool


FIRST_PLAN_UNTIL = "20261204-061722"
"""When the first paired-blocks plan (2026-12-04 05:38 UTC) gave way to today's (06:17 UTC): its
sessions measured each block's launch with `repeats x looks` and pooled a trial with its history
whatever the trial's own spread. Their options are those of the sessions after it, so a session's
id, which names the second it started (`YYYYMMDD-HHMMSS-xxxx`, its host's clock: UTC there), tells which plan it ran; a replay
reads it from the recording itself (benchmarks/h200-2026-12-04-blocks)."""


def first_plan(state: LoopState) -> bool:
    """Whether the session started under the first paired-blocks plan (pure)."""
    sid = state.session_id
    return state.options.paired_blocks and bool(_STAMPED.fullmatch(sid)) and sid[:15] < FIRST_PLAN_UNTIL


FIRST_VERDICT_LOOKS = 3
"""Looks a trial of a `first_verdict` session plans for at least (within `max_launches_per_arm`
and `trial_budget_s`): a first session on a host pools one A/A launch (1 df) with its own blocks,
and with one look an undecided first look was its verdict (inconclusive at t = 12.7). Simulated
(docs/deciding.md, "A first verdict"): a no-op on a host whose launches vary by 0.3% is called the
same within +-3% in ~98% of first sessions with three looks, ~57% with one."""


def trial_plan(state: LoopState, pool: Pool, baseline: Measurement | None = None) -> BlockPlan:
    """A trial's plan from the pool and what the running launch and the reference measurement (or
    `baseline`) cost, with `FIRST_VERDICT_LOOKS` looks in `first_verdict` sessions (pure)."""
    looks = FIRST_VERDICT_LOOKS if state.options.first_verdict else 1
    return plan_blocks(pool, state.target.decide, *cost(state, baseline), min_looks=looks)


def plan(state: LoopState, runtime: Runtime[LoopContext], baseline: Measurement) -> str:
    """The baseline's plan line for the session's trials, from the pool and the baseline's launch
    and measurement cost."""
    pool = history(state, runtime)
    return trial_plan(state, pool, baseline).line(pool)


def group_of(state: LoopState, label: str) -> str:
    """The store group of one trial's blocks (pure)."""
    return f"blocks:{state.session_id}:{label}"


def differences(per_launch: Sequence[LaunchLocation]) -> list[float]:
    """Each complete block's d = location(reference) - location(candidate), in block order: the
    i-th reference launch with the i-th candidate launch (pure)."""
    ref = [p.location_log for p in per_launch if p.arm == "reference"]
    cand = [p.location_log for p in per_launch if p.arm == "candidate"]
    return [r - c for r, c in zip(ref, cand, strict=False)]


def keep_blocks(
    state: LoopState, runtime: Runtime[LoopContext], label: str, per_launch: Sequence[LaunchLocation]
) -> int:
    """Keep a trial's blocks in the store for the next trial (two or more: one block has no spread
    of its own); how many were kept."""
    ds = differences(per_launch)
    if len(ds) < 2:
        return 0
    key, group = shape_key(state.target), group_of(state, label)
    numbers = [p.launch_number for p in per_launch if p.arm == "candidate"]
    samples = [
        AASample(
            target_key=key,
            group=group,
            session_id=state.session_id,
            launch_number=-n,  # the store keys samples by (session, launch): a launch's own A/A sample is +n
            location_log=d / math.sqrt(2.0),
            requests=2,
        )
        for d, n in zip(ds, numbers, strict=False)
    ]
    call(runtime, aa.record, AARecordArgs(target_key=key, more=samples))
    return len(samples)
