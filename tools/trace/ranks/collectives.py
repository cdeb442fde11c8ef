"""Collectives across tensor-parallel ranks (pure): each rank file's time in collectives and in
waiting for work, and, over the merged ranks, the collectives' share of decode, the spread of the
ranks' step times and the rank the others wait for (a straggler).

In a tensor-parallel step every rank meets the others at each all-reduce, so a rank that arrives
late makes the others wait inside the collective: the rank with the least time in collectives is
the one the others wait for, and the least time is the collectives' own cost (no waiting). Idle
time (a rank waiting for rank 0's next command in a host broadcast) is not step time.
A rank's step time is its ProfilerStep wall time where the trace marks steps (the ranks then take
about the same: they meet at every collective), else its busy self time per step.
"""

import re
import statistics
from collections.abc import Sequence

from state.profiling.profile import CollectiveStats, ProfileSummary

COLLECTIVE_OPS = re.compile(
    r"^(gloo|nccl):(all_reduce|all_gather|_allgather_base|reduce_scatter|_reduce_scatter_base|all_to_all)"
)
"""The record functions of collectives (gloo's and NCCL's, kept as ops by tools/trace/read/collect.py):
on gloo their span holds the wait for the other ranks, which c10d's op (`c10d::allreduce_`, an
enqueue) does not."""
COLLECTIVE_KERNELS = re.compile(
    r"(?i)nccl.*(allreduce|allgather|reducescatter|alltoall)|cross_device_reduce|all_reduce"
)
"""Device kernels of collectives (NCCL's, custom all-reduce kernels)."""
IDLE_OPS = re.compile(r"^(gloo|nccl):broadcast$")
"""Host broadcasts that carry rank 0's next command to the other ranks: idle, not step time."""
STRAGGLER_WAIT_MIN = 0.1
"""Least wait (fraction of the median step) that names a straggler."""


def collective_us(summary: ProfileSummary) -> float:
    """One file's time in collectives: device time of their kernels on a device trace with
    kernels, else the self time of their operators, in microseconds."""
    if summary.time_basis == "device" and summary.kernels:
        return sum(k.device_us for k in summary.kernels if COLLECTIVE_KERNELS.search(k.name))
    return sum(op.self_us for op in summary.ops if COLLECTIVE_OPS.search(op.name))


def idle_us(summary: ProfileSummary) -> float:
    """One file's self time in host broadcasts of commands (CPU basis only; on a device basis the
    host's wait holds no device time), in microseconds."""
    if summary.time_basis == "device":
        return 0.0
    return sum(op.self_us for op in summary.ops if IDLE_OPS.search(op.name))


def step_time_us(summary: ProfileSummary) -> float:
    """One rank's decode step: its ProfilerStep wall time when the trace marks steps (host time
    outside operators included), else its busy time (self time less idle_us) per step."""
    if summary.step_wall_us is not None:
        return summary.step_wall_us
    return max(summary.total_self_us - idle_us(summary), 0.0) / summary.steps


def collective_stats(summaries: Sequence[ProfileSummary]) -> CollectiveStats | None:
    """Share, spread, wait and straggler over the rank files; None for fewer than two."""
    if len(summaries) < 2:
        return None
    step_us = [step_time_us(s) for s in summaries]
    coll_us = [collective_us(s) / s.steps for s in summaries]
    median = statistics.median(step_us)
    wait = max(coll_us) - min(coll_us)
    straggler = None
    if median > 0 and wait >= STRAGGLER_WAIT_MIN * median:
        straggler = coll_us.index(min(coll_us))
    return CollectiveStats(
        ranks=len(summaries),
        share=min(sum(coll_us) / sum(step_us), 1.0) if sum(step_us) > 0 else 0.0,
        rank_step_us=step_us,
        rank_collective_us=coll_us,
        spread=(max(step_us) - min(step_us)) / median if median > 0 else 0.0,
        wait_us=wait,
        transfer_us=min(coll_us),
        straggler=straggler,
    )


def rank_waits(summaries: Sequence[ProfileSummary]) -> tuple[list[float], list[float], int]:
    """Per rank (file order): its wait in collectives per step (its time in collectives less the
    least of any rank: the collectives' own cost), its work per step outside collectives (step
    time less collectives), both in microseconds, and the slowest rank: the most work outside
    collectives, the rank the others wait for."""
    step_us = [step_time_us(s) for s in summaries]
    coll_us = [collective_us(s) / s.steps for s in summaries]
    least = min(coll_us)
    work = [max(step - coll, 0.0) for step, coll in zip(step_us, coll_us, strict=True)]
    return [c - least for c in coll_us], work, work.index(max(work))
