"""Host against device per decode step: how long the host takes to issue a step's kernels, how long
the device runs them, and which of the two bounds the step.

Pure functions over the collected host columns (launch, graph-launch and sync calls) and the
kernel intervals of each step window (`tools.trace.analyses.windows`: marked or inferred;
`tools.trace.analyses.device.windows_of`), on numpy arrays.
"""

from bisect import bisect_left, bisect_right
from statistics import median

import numpy as np

from state.profiling.profile import StepBounds, WindowBounds
from tools.trace.analyses.device import Windows
from tools.trace.analyses.windows import StepWindows
from tools.trace.read.collect import GRAPH_LAUNCH, LAUNCH, SYNC, Collected


def _host_calls(
    col: Collected,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[float, float]], np.ndarray]:
    """Starts and ends of every kernel-launch call sorted by (start, end), which of them launch a
    CUDA graph, every sync call's (start, end) sorted, and the sorted starts of the graph launches."""
    times = [np.frombuffer(c.times, dtype=np.float64).reshape(-1, 2) for c in col.threads.values()]
    kinds = [np.frombuffer(c.ints, dtype=np.int64)[0::2] for c in col.threads.values()]
    t = np.concatenate(times) if times else np.zeros((0, 2))
    kind = np.concatenate(kinds) if kinds else np.zeros(0, dtype=np.int64)
    start, end = t[:, 0], t[:, 0] + t[:, 1]
    launch = (kind == LAUNCH) | (kind == GRAPH_LAUNCH)
    order = np.lexsort((end[launch], start[launch]))
    sync = kind == SYNC
    syncs = sorted(zip(start[sync].tolist(), end[sync].tolist(), strict=True))
    is_graph = (kind == GRAPH_LAUNCH)[launch][order]
    graphs = np.sort(start[kind == GRAPH_LAUNCH])
    return start[launch][order], end[launch][order], is_graph, syncs, graphs


def _issue_ends(
    starts: np.ndarray, ends: np.ndarray, is_graph: np.ndarray, kernels: np.ndarray
) -> np.ndarray:
    """When each launch call stopped holding the device back: its end, or for a CUDA-graph launch
    the start of the first kernel at or after the call's start when that comes earlier. A graph
    launch call can last as long as the whole graph runs (CUPTI serializes it under the profiler);
    once its first kernel runs, the device is busy and the host is no longer what it waits for."""
    if not is_graph.any() or not len(kernels):
        return ends
    ks = np.sort(kernels)
    at = np.searchsorted(ks, starts[is_graph], side="left")
    first = np.where(at < len(ks), ks[np.minimum(at, len(ks) - 1)], np.inf)
    out = ends.copy()
    out[is_graph] = np.minimum(ends[is_graph], np.maximum(first, starts[is_graph]))
    return out


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
    launch_start, launch_end, is_graph, syncs, graphs = _host_calls(col)
    sync_starts = [a for a, _ in syncs]
    reach = np.maximum.accumulate([b for _, b in syncs]).tolist() if syncs else []
    rows = []
    for index, (_, start, wall) in enumerate(steps):
        end = start + wall
        lo, hi = np.searchsorted(launch_start, [start, end], side="left").tolist()
        blocked = _covered(syncs[bisect_left(sync_starts, start) : bisect_left(sync_starts, end)], start, end)
        kernel_start, kernel_end = windows.of_step(index)
        if hi > lo:
            starts, ends, graph = launch_start[lo:hi], launch_end[lo:hi], is_graph[lo:hi]
            issued = _issue_ends(starts, ends, graph, kernel_start)
            # A graph launch call still running once its replay started is the host waiting on the
            # device, like a sync: left out of the issue time, as syncs are.
            waits = [
                (a, b) for a, b in zip(issued[graph].tolist(), ends[graph].tolist(), strict=True) if b > a
            ]
            first, last = float(starts[0]), float(ends.max())
            # syncs that end by `first` (the latest end so far at most `first`) cover none of it
            waited = syncs[bisect_right(reach, first) : bisect_left(sync_starts, last)] + waits
            issue = max(last - first - _covered(waited, first, last), 0.0)
        else:
            issue = 0.0
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
    per_window = []
    for w_wall, w_host, w_issue, w_device, *_ in rows:
        w_wall, w_issue, w_device = w_wall / found.per, w_issue / found.per, w_device / found.per
        w_serial = max(w_host / found.per - w_issue, 0.0)
        residual = w_wall - w_serial - max(w_issue, w_device)
        per_window.append(WindowBounds(wall_us=w_wall, issue_us=w_issue, serial_host_us=w_serial,
                                       device_us=w_device, residual_us=residual))  # fmt: skip
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
        per_window=per_window,
    )
