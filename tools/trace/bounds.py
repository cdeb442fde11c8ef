"""Host against device per decode step: how long the host takes to issue a step's kernels, how long
the device runs them, and which of the two bounds the step.

Pure functions over the collected host columns (launch, graph-launch and sync calls) and the
kernel intervals of each step window (`tools.trace.windows`: marked or inferred;
`tools.trace.device.windows_of`), on numpy arrays.
"""

from bisect import bisect_left
from statistics import median

import numpy as np

from state.profile import StepBounds
from tools.trace.collect import GRAPH_LAUNCH, LAUNCH, SYNC, Collected
from tools.trace.device import Windows
from tools.trace.windows import StepWindows


def _host_calls(col: Collected) -> tuple[np.ndarray, np.ndarray, list[tuple[float, float]], np.ndarray]:
    """Starts and ends of every kernel-launch call sorted by (start, end), every sync call's (start,
    end) sorted, and the sorted starts of the graph launches."""
    times = [np.frombuffer(c.times, dtype=np.float64).reshape(-1, 2) for c in col.threads.values()]
    kinds = [np.frombuffer(c.ints, dtype=np.int64)[0::2] for c in col.threads.values()]
    t = np.concatenate(times) if times else np.zeros((0, 2))
    kind = np.concatenate(kinds) if kinds else np.zeros(0, dtype=np.int64)
    start, end = t[:, 0], t[:, 0] + t[:, 1]
    launch = (kind == LAUNCH) | (kind == GRAPH_LAUNCH)
    order = np.lexsort((end[launch], start[launch]))
    sync = kind == SYNC
    syncs = sorted(zip(start[sync].tolist(), end[sync].tolist(), strict=True))
    return start[launch][order], end[launch][order], syncs, np.sort(start[kind == GRAPH_LAUNCH])


def _covered(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Time of [start, end) covered by the intervals (overlaps once)."""
    total, reach = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total


def _busy(start: np.ndarray, end: np.ndarray) -> float:
    """Time covered by the intervals (overlaps once): `_covered` over all time, on arrays."""
    if not len(start):
        return 0.0
    order = np.lexsort((end, start))
    start, end = start[order], end[order]
    reach = np.concatenate([[-np.inf], np.maximum.accumulate(end)[:-1]])
    return float(np.cumsum(np.maximum(end - np.maximum(start, reach), 0.0))[-1])


def step_bounds(col: Collected, found: StepWindows, windows: Windows) -> StepBounds | None:
    """Medians over the step windows of host issue time, device busy time and what bounds the step
    (a window of several steps divided by their number); None without windows or kernels."""
    steps = found.steps
    if not steps or not col.kernels.times:
        return None
    launch_start, launch_end, syncs, graphs = _host_calls(col)
    sync_starts = [a for a, _ in syncs]
    rows = []
    for index, (_, start, wall) in enumerate(steps):
        end = start + wall
        lo, hi = np.searchsorted(launch_start, [start, end], side="left").tolist()
        blocked = _covered(syncs[bisect_left(sync_starts, start) : bisect_left(sync_starts, end)], start, end)
        if hi > lo:
            first, last = float(launch_start[lo]), float(launch_end[lo:hi].max())
            issue = max(last - first - _covered(syncs[: bisect_left(sync_starts, last)], first, last), 0.0)
        else:
            issue = 0.0
        kernel_start, kernel_end = windows.of_step(index)
        g_lo, g_hi = np.searchsorted(graphs, [start, end], side="left").tolist()
        host = max(wall - blocked, 0.0)
        rows.append(
            (
                wall,
                host,
                min(issue, host),
                _busy(kernel_start, kernel_end),
                len(kernel_start),
                (hi - lo) - (g_hi - g_lo),
                g_hi - g_lo,
            )
        )
    wall, host, issue, device, kernels, n_launch, n_graph = (
        median(col_) / found.per for col_ in zip(*rows, strict=True)
    )
    serial = max(host - issue, 0.0)
    return StepBounds(
        steps=len(rows) * found.per,
        windows=found.source,
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
