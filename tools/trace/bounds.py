"""Host against device per decode step: how long the host takes to issue a step's kernels, how long
the device runs them, and which of the two bounds the step.

Pure functions over the collected host columns (launch, graph-launch and sync calls) and the
kernel intervals of each ProfilerStep window (`tools.trace.device.windows_of`).
"""

from bisect import bisect_left
from statistics import median

from state.profile import StepBounds
from tools.trace.collect import GRAPH_LAUNCH, LAUNCH, SYNC, Collected
from tools.trace.device import kernels_by_window


def _host_calls(col: Collected) -> tuple[list[tuple[float, float]], list[tuple[float, float]], list[float]]:
    """(start, end) of every kernel-launch call and every sync call, and the start of each graph launch."""
    launches, syncs, graphs = [], [], []
    for cols in col.threads.values():
        for ts, dur, kind in zip(cols.ts, cols.dur, cols.kind, strict=True):
            if kind == LAUNCH:
                launches.append((ts, ts + dur))
            elif kind == GRAPH_LAUNCH:
                launches.append((ts, ts + dur))
                graphs.append(ts)
            elif kind == SYNC:
                syncs.append((ts, ts + dur))
    return sorted(launches), sorted(syncs), sorted(graphs)


def _within(
    intervals: list[tuple[float, float]], starts: list[float], start: float, end: float
) -> list[tuple[float, float]]:
    """The intervals (sorted, `starts` their starts) that start inside [start, end)."""
    return intervals[bisect_left(starts, start) : bisect_left(starts, end)]


def _covered(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Time of [start, end) covered by the intervals (overlaps once)."""
    total, reach = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total


def step_bounds(
    col: Collected,
    steps: list[tuple[str, float, float]],
    windows: dict[tuple[int, int], list[tuple[float, float]]],
) -> StepBounds | None:
    """Medians over the steps of host issue time, device busy time and what bounds the step; None
    without step markers or without kernels."""
    if not steps or not col.kernels.times:
        return None
    launches, syncs, graphs = _host_calls(col)
    launch_starts, sync_starts = [a for a, _ in launches], [a for a, _ in syncs]
    by_window = kernels_by_window(windows)
    rows = []
    for index, (_, start, wall) in enumerate(steps):
        end = start + wall
        step_launches = _within(launches, launch_starts, start, end)
        blocked = _covered(_within(syncs, sync_starts, start, end), start, end)
        if step_launches:
            first, last = step_launches[0][0], max(b for _, b in step_launches)
            issue = max(last - first - _covered(syncs[: bisect_left(sync_starts, last)], first, last), 0.0)
        else:
            issue = 0.0
        kernels = by_window.get(index, [])
        step_graphs = bisect_left(graphs, end) - bisect_left(graphs, start)
        host = max(wall - blocked, 0.0)
        rows.append(
            (
                wall,
                host,
                min(issue, host),
                _covered(kernels, float("-inf"), float("inf")),
                len(kernels),
                len(step_launches) - step_graphs,
                step_graphs,
            )
        )
    wall, host, issue, device, kernels, n_launch, n_graph = (median(col_) for col_ in zip(*rows, strict=True))
    serial = max(host - issue, 0.0)
    return StepBounds(
        steps=len(rows),
        wall_us=wall,
        host_us=host,
        issue_us=issue,
        serial_host_us=serial,
        device_us=device,
        residual_us=wall - serial - max(issue, device),
        kernels=kernels,
        launches=n_launch,
        graph_launches=n_graph,
        bound="host launch" if issue > device else "device",
    )
