"""A trace's summary from its collected columns: nest each host thread (`tools.trace.walk`), add the
device view (`tools.trace.device`) and the host-against-device bounds (`tools.trace.bounds`)."""

import numpy as np

from state.profile import OpStat, ProfileSummary, SyncStat
from tools.trace.bounds import step_bounds
from tools.trace.checks import check_events, check_steps
from tools.trace.collect import Collected
from tools.trace.device import (
    device_activity,
    kernel_stats,
    step_stats,
    windows_of,
    work_by_correlation,
)
from tools.trace.walk import Walked, walk


def summarize(
    col: Collected, source: str, steps: int | None = None, *, require_steps: bool = False
) -> ProfileSummary:
    """Group host ops by (name, input dims), with device time when kernels were recorded."""
    check_events(col, source)
    corrs, work, first = work_by_correlation(col.kernels)
    walked, taken = walk(col, corrs, work)
    if require_steps and not steps:
        check_steps(walked, source)
    by_id = list(col.kernel_names)
    kernel_name = np.frombuffer(col.kernels.ints, dtype=np.int64)[2::3]
    left = np.flatnonzero(~taken)
    for slot in left[np.argsort(first[left])].tolist():  # unclaimed work, in the order it appears
        dur = float(work[slot])
        walked.add(col.intern((by_id[kernel_name[first[slot]]], (), ())), dur, dur, None)
    ops = _op_stats(walked, col)
    total_us = sum(op.self_us for op in ops)
    step_count = steps or len(walked.steps) or walked.decode_calls or 1
    walked.steps.sort(key=lambda s: s[1])
    windows = windows_of(col.kernels, [start for _, start, _ in walked.steps])
    on_device = bool(col.kernels.times)
    return ProfileSummary(
        source=source,
        time_basis="device" if on_device else "cpu",
        steps=step_count,
        total_self_us=total_us,
        step_us=total_us / step_count,
        ops=ops,
        device_name=col.device_names[0] if col.device_names else None,
        kernels=kernel_stats(col.kernels, col.kernel_names, col.graph_corrs),
        step_stats=step_stats(walked.steps, windows),
        device_activity=device_activity(windows, col.launch_us) if on_device else None,
        syncs=_sync_stats(walked),
        step_wall_us=sum(s[2] for s in walked.steps) / len(walked.steps) if walked.steps else None,
        step_bounds=step_bounds(col, walked.steps, windows) if on_device else None,
    )


def _op_stats(walked: Walked, col: Collected) -> list[OpStat]:
    """One OpStat per group that took any time, heaviest first."""
    busy = {key: g for key, g in walked.groups.items() if g[2] > 0}
    total_us = sum(g[1] for g in busy.values())
    ops = []
    for key, (calls, self_us, total, location) in busy.items():
        name, dims, types = col.key_list[key]
        ops.append(
            OpStat(
                name=name,
                calls=calls,
                self_us=self_us,
                total_us=total,
                share=min(self_us / total_us, 1.0) if total_us else 0.0,
                input_dims=[list(d) for d in dims],
                input_types=list(types),
                location=location,
            )
        )
    return sorted(ops, key=lambda op: op.self_us, reverse=True)


def _sync_stats(walked: Walked) -> list[SyncStat]:
    """Sync rows; decode_calls counts forward_decode if annotated, else ProfilerSteps, else all."""
    column = 1 if walked.decode_calls else 2 if walked.steps else 0
    rows = [
        SyncStat(name=name, caller=caller, calls=row[0], decode_calls=row[column], host_us=row[3])
        for (name, caller), row in walked.syncs.items()
    ]
    return sorted(rows, key=lambda s: (s.host_us, s.calls), reverse=True)
