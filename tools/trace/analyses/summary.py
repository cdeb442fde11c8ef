"""A trace's summary from its collected columns: nest each host thread (`tools.trace.analyses.walk`), add the
device view (`tools.trace.analyses.device`) and the host-against-device bounds (`tools.trace.analyses.bounds`)."""

import numpy as np

from state.profiling.profile import OpStat, ProfileSummary, SyncStat
from tools.trace.analyses.bounds import step_bounds
from tools.trace.analyses.checks import check_events
from tools.trace.analyses.device import (
    device_activity,
    kernel_stats,
    step_stats,
    windows_of,
    work_by_correlation,
)
from tools.trace.analyses.walk import Walked, walk
from tools.trace.analyses.windows import StepWindows, inferred, marked, whole
from tools.trace.read.collect import Collected


def summarize(col: Collected, source: str, steps: int | None = None) -> ProfileSummary:
    """Group host ops by (name, input dims), with device time when kernels were recorded; steps
    and their bounds over the windows the trace's markers give, else its repeating work, else
    (with `steps`) the whole trace."""
    check_events(col, source)
    corrs, work, first = work_by_correlation(col.kernels)
    walked, taken = walk(col, corrs, work)
    by_id = list(col.kernel_names)
    kernel_name = np.frombuffer(col.kernels.ints, dtype=np.int64)[2::3]
    left = np.flatnonzero(~taken)
    for slot in left[np.argsort(first[left])].tolist():  # unclaimed work, in the order it appears
        dur = float(work[slot])
        walked.add(col.intern((by_id[kernel_name[first[slot]]], (), ())), dur, dur, None)
    ops = _op_stats(walked, col)
    total_us = sum(op.self_us for op in ops)
    found = _windows(col, walked, steps)
    step_count = steps or (found.count if found else 0) or walked.decode_calls or 1
    marks = found.steps if found else []
    starts = [start for _, start, _ in marks] + ([found.tail] if found and found.tail is not None else [])
    windows = windows_of(col.kernels, starts)
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
        step_stats=step_stats(marks, windows) if found and found.per == 1 else [],
        device_activity=device_activity(windows, col.launch_us) if on_device else None,
        syncs=_sync_stats(walked),
        step_wall_us=sum(s[2] for s in marks) / len(marks) / found.per if found else None,
        step_bounds=step_bounds(col, found, windows) if on_device and found else None,
        step_source=_source(found),
    )


def _windows(col: Collected, walked: Walked, steps: int | None) -> StepWindows | None:
    """The step windows: marked, else inferred from the repeating work, else the whole trace as
    the given number of steps; None when none of them is known."""
    return marked(walked.marks) or inferred(col, walked.top_ops) or (whole(col, steps) if steps else None)


def _source(found: StepWindows | None) -> str | None:
    """How the steps were found, in words."""
    if found is None:
        return None
    if found.source in ("kernel pattern", "operator pattern"):
        layers = f", {found.layers} repeats of a per-layer pattern each" if found.layers else ""
        return f"inferred from the {found.source}: {found.count} repeats{layers}"
    return found.source


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
