"""The device side of a trace: time per kernel name, idle gaps, the launch-bound verdict, steps.

Pure functions over the kernel columns that `tools.trace.collect` gathered.
"""

from bisect import bisect_right
from statistics import median

import numpy as np

from state.profile import DeviceActivity, KernelStat, StepStat
from tools.trace.collect import KernelColumns

GAP_MIN_US = 1.0
LAUNCH_BOUND_IDLE_SHARE = 0.3
LAUNCH_BOUND_MEDIAN_KERNEL_US = 20.0


def work_by_correlation(k: KernelColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Correlation ids (sorted), their summed kernel time (a CUDA graph launch has many kernels),
    and the index of each id's first kernel."""
    corr = np.frombuffer(k.ints, dtype=np.int64)[1::3]
    ids, first, which = np.unique(corr, return_index=True, return_inverse=True)
    dur = np.frombuffer(k.times, dtype=np.float64)[1::2]
    return ids, np.bincount(which, dur, minlength=len(ids)), first


def kernel_stats(k: KernelColumns, names: dict[str, int], graph_corrs: set[int]) -> list[KernelStat]:
    """One row per kernel name, by device time, largest first."""
    sums: dict[int, list] = {}
    for corr, name, dur in zip(k.corr, k.name, k.dur, strict=False):
        row = sums.get(name)
        if row is None:
            row = sums[name] = [0, 0.0, 0]
        row[0] += 1
        row[1] += dur
        row[2] += corr in graph_corrs
    total = sum(row[1] for row in sums.values())
    by_id = {i: name for name, i in names.items()}
    stats = [
        KernelStat(
            name=by_id[i], calls=c, device_us=us, share=min(us / total, 1.0) if total else 0.0, graph_calls=g
        )
        for i, (c, us, g) in sums.items()
    ]
    return sorted(stats, key=lambda s: s.device_us, reverse=True)


def windows_of(
    k: KernelColumns, step_starts: list[float]
) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """Kernel (start, end) intervals per (device, step window); window k runs from step k's start to
    step k+1's; one window (0) when there are no steps; kernels before the first step are left out."""
    out: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for device, ts, dur in zip(k.device, k.ts, k.dur, strict=True):
        window = bisect_right(step_starts, ts) - 1 if step_starts else 0
        if window >= 0:
            out.setdefault((device, window), []).append((ts, ts + dur))
    return out


def device_activity(
    windows: dict[tuple[int, int], list[tuple[float, float]]], launch_us: float
) -> DeviceActivity:
    """Busy time, span and idle gaps between kernels, summed over the windows; the default verdict."""
    busy = span = 0.0
    gaps: list[float] = []
    durations: list[float] = []
    for intervals in windows.values():
        intervals.sort()
        durations += [end - start for start, end in intervals]
        w_busy, w_gaps = _merge(intervals)
        busy += w_busy
        span += max(end for _, end in intervals) - intervals[0][0]
        gaps += [g for g in w_gaps if g >= GAP_MIN_US]
    idle_share = min(max((span - busy) / span, 0.0), 1.0) if span > 0 else 0.0
    median_kernel = median(durations) if durations else 0.0
    return DeviceActivity(
        kernels=len(durations),
        busy_us=busy,
        span_us=span,
        idle_share=idle_share,
        gaps=len(gaps),
        median_gap_us=median(gaps) if gaps else 0.0,
        median_kernel_us=median_kernel,
        launch_us=launch_us,
        launch_bound=bool(durations)
        and idle_share >= LAUNCH_BOUND_IDLE_SHARE
        and median_kernel <= LAUNCH_BOUND_MEDIAN_KERNEL_US,
    )


def _merge(intervals: list[tuple[float, float]]) -> tuple[float, list[float]]:
    """Busy time of sorted intervals (overlaps once) and the idle gaps between them."""
    busy, gaps = 0.0, []
    cur_start, cur_end = intervals[0]
    for start, end in intervals[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            gaps.append(start - cur_end)
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return busy + cur_end - cur_start, gaps


def step_stats(
    steps: list[tuple[str, float, float]], windows: dict[tuple[int, int], list[tuple[float, float]]]
) -> list[StepStat]:
    """One StepStat per step marker, in time order, with the kernels of its window."""
    out = []
    by_window = kernels_by_window(windows)
    for index, (name, _, wall) in enumerate(steps):
        intervals = by_window.get(index, [])
        out.append(
            StepStat(
                name=name,
                wall_us=wall,
                kernels=len(intervals),
                device_us=sum(end - start for start, end in intervals),
            )
        )
    return out


def kernels_by_window(
    windows: dict[tuple[int, int], list[tuple[float, float]]],
) -> dict[int, list[tuple[float, float]]]:
    """The kernel intervals of each step window, all devices together (in the windows' order)."""
    out: dict[int, list[tuple[float, float]]] = {}
    for (_, window), intervals in windows.items():
        out.setdefault(window, []).extend(intervals)
    return out
