"""Host against device per decode step: how long the host takes to issue a step's kernels, how long
the device runs them, and which of the two bounds the step.

Pure functions over the collected host columns (launch, graph-launch and sync calls) and the
kernel intervals of each ProfilerStep window (`tools.trace.device.windows_of`).
"""

from statistics import median

from state.profile import StepBounds
from tools.trace.collect import GRAPH_LAUNCH, LAUNCH, SYNC, Collected


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


def _within(intervals: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The intervals that start inside [start, end)."""
    return [iv for iv in intervals if start <= iv[0] < end]


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
    rows = []
    for index, (_, start, wall) in enumerate(steps):
        end = start + wall
        step_launches = _within(launches, start, end)
        blocked = _covered(_within(syncs, start, end), start, end)
        if step_launches:
            first, last = step_launches[0][0], max(b for _, b in step_launches)
            issue = max(last - first - _covered(syncs, first, last), 0.0)
        else:
            issue = 0.0
        kernels = [iv for (_, w), ivs in windows.items() if w == index for iv in ivs]
        host = max(wall - blocked, 0.0)
        rows.append(
            (
                wall,
                host,
                min(issue, host),
                _covered(kernels, float("-inf"), float("inf")),
                len(kernels),
                len(step_launches) - len(_within([(g, g) for g in graphs], start, end)),
                len(_within([(g, g) for g in graphs], start, end)),
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
