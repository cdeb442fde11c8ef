"""Merge the summaries of several trace files (one per rank) into one (pure)."""

from collections.abc import Sequence

from state.profiling.profile import (
    DeviceActivity,
    KernelStat,
    OpStat,
    ProfileSummary,
    RankStat,
    StepBounds,
    SyncStat,
)
from tools.errors import TraceError
from tools.trace.ranks.collectives import collective_stats, collective_us, idle_us


def merge_summaries(summaries: Sequence[ProfileSummary]) -> ProfileSummary:
    """One summary: ops, kernels and syncs summed across files, shares recomputed, the step count of
    the first file and step_us averaged over ranks, the critical rank's step bounds; `ranks` lists each
    file with its own bounds. One file is returned as is."""
    if not summaries:
        raise TraceError("no profiler files to read; pass trace files or a directory holding them")
    if len(summaries) == 1:
        return summaries[0]
    bases = {s.time_basis for s in summaries}
    if len(bases) > 1:
        raise TraceError(
            f"{', '.join(s.source for s in summaries)}: mix device and CPU-only traces; "
            "pass the traces of one run"
        )
    first = summaries[0]
    ops = _merge_ops([op for s in summaries for op in s.ops])
    total = sum(op.self_us for op in ops)
    activities = [s.device_activity for s in summaries if s.device_activity is not None]
    return ProfileSummary(
        source=", ".join(s.source for s in summaries),
        time_basis=first.time_basis,
        steps=first.steps,
        total_self_us=total,
        step_us=total / first.steps / len(summaries),
        ops=ops,
        ranks=[
            RankStat(
                source=s.source,
                total_self_us=s.total_self_us,
                step_us=s.step_us,
                step_bounds=s.step_bounds,
                step_source=s.step_source,
                collective_us=collective_us(s),
                idle_us=idle_us(s),
            )
            for s in summaries
        ],
        device_name=first.device_name,
        kernels=_merge_kernels([k for s in summaries for k in s.kernels]),
        step_stats=first.step_stats,
        device_activity=_merge_activity(activities) if activities else None,
        syncs=_merge_syncs([r for s in summaries for r in s.syncs]),
        step_wall_us=first.step_wall_us,
        step_bounds=critical_bounds(summaries),
        step_source=first.step_source,
        collectives=collective_stats(summaries),
    )


def critical_bounds(summaries: Sequence[ProfileSummary]) -> StepBounds | None:
    """The bounds of the rank whose modelled step (`serial + max(issue, device)`) is longest: ranks
    of one tensor-parallel step wait for each other, so the slowest sets the step; None when no
    rank has bounds."""
    known = [s.step_bounds for s in summaries if s.step_bounds is not None]
    return max(known, key=lambda b: b.serial_host_us + max(b.issue_us, b.device_us), default=None)


def _merge_ops(ops: list[OpStat]) -> list[OpStat]:
    """Sum groups with the same (name, dims); shares of the new total; heaviest first."""
    merged: dict[tuple[str, str], OpStat] = {}
    for op in ops:
        key = (op.name, repr(op.input_dims))
        if key in merged:
            m = merged[key]
            merged[key] = m.model_copy(
                update={
                    "calls": m.calls + op.calls,
                    "self_us": m.self_us + op.self_us,
                    "total_us": m.total_us + op.total_us,
                    "location": m.location or op.location,
                }
            )
        else:
            merged[key] = op
    total = sum(op.self_us for op in merged.values())
    out = [
        op.model_copy(update={"share": min(op.self_us / total, 1.0) if total else 0.0})
        for op in merged.values()
    ]
    return sorted(out, key=lambda op: op.self_us, reverse=True)


def _merge_kernels(kernels: list[KernelStat]) -> list[KernelStat]:
    """Sum kernel rows by name; shares of the new total."""
    sums: dict[str, list] = {}
    for k in kernels:
        row = sums.setdefault(k.name, [0, 0.0, 0])
        row[0] += k.calls
        row[1] += k.device_us
        row[2] += k.graph_calls
    total = sum(row[1] for row in sums.values())
    out = [
        KernelStat(name=n, calls=c, device_us=us, share=min(us / total, 1.0) if total else 0.0, graph_calls=g)
        for n, (c, us, g) in sums.items()
    ]
    return sorted(out, key=lambda k: k.device_us, reverse=True)


def _merge_activity(acts: list[DeviceActivity]) -> DeviceActivity:
    """Sums over ranks; medians are the ranks' median; launch-bound if most ranks are."""
    busy, span = sum(a.busy_us for a in acts), sum(a.span_us for a in acts)
    mid = sorted(acts, key=lambda a: a.idle_share)[len(acts) // 2]
    return DeviceActivity(
        kernels=sum(a.kernels for a in acts),
        busy_us=busy,
        span_us=span,
        idle_share=min(max((span - busy) / span, 0.0), 1.0) if span else 0.0,
        gaps=sum(a.gaps for a in acts),
        median_gap_us=mid.median_gap_us,
        median_kernel_us=mid.median_kernel_us,
        launch_us=sum(a.launch_us for a in acts),
        launch_bound=sum(a.launch_bound for a in acts) * 2 > len(acts),
    )


def _merge_syncs(rows: list[SyncStat]) -> list[SyncStat]:
    """Sum sync rows by (name, caller)."""
    sums: dict[tuple[str, str], SyncStat] = {}
    for r in rows:
        m = sums.get((r.name, r.caller))
        sums[(r.name, r.caller)] = (
            r
            if m is None
            else m.model_copy(
                update={
                    "calls": m.calls + r.calls,
                    "decode_calls": m.decode_calls + r.decode_calls,
                    "host_us": m.host_us + r.host_us,
                }
            )
        )
    return sorted(sums.values(), key=lambda s: (s.host_us, s.calls), reverse=True)
