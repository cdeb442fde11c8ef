"""The device side of a trace: time per kernel name, idle gaps, the launch-bound verdict, steps.

Pure functions over the kernel columns that `tools.trace.read.collect` gathered, on numpy arrays; sums
that the summary reports are taken in the order the kernels appear (`np.cumsum` and `np.bincount`
add in array order), so they do not depend on how the columns were built.
"""

from dataclasses import dataclass

import numpy as np

from state.profiling.profile import DeviceActivity, KernelStat, StepStat
from tools.trace.read.collect import KernelColumns

GAP_MIN_US = 1.0
LAUNCH_BOUND_IDLE_SHARE = 0.3
LAUNCH_BOUND_MEDIAN_KERNEL_US = 20.0


def _columns(k: KernelColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, duration, device, correlation id, name id) of every kernel, as arrays (no copy)."""
    times = np.frombuffer(k.times, dtype=np.float64)
    ints = np.frombuffer(k.ints, dtype=np.int64)
    return times[0::2], times[1::2], ints[0::3], ints[1::3], ints[2::3]


def work_by_correlation(k: KernelColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Correlation ids (sorted), their summed kernel time (a CUDA graph launch has many kernels),
    and the index of each id's first kernel."""
    _, dur, _, corr, _ = _columns(k)
    ids, first, which = np.unique(corr, return_index=True, return_inverse=True)
    return ids, np.bincount(which, dur, minlength=len(ids)), first


def kernel_stats(k: KernelColumns, names: dict[str, int], graph_corrs: set[int]) -> list[KernelStat]:
    """One row per kernel name, by device time, largest first (ties: first seen first)."""
    _, dur, _, corr, name = _columns(k)
    if not len(dur):
        return []
    size = len(names)
    calls = np.bincount(name, minlength=size)
    device_us = np.bincount(name, dur, minlength=size)
    graphs = np.bincount(name, np.isin(corr, np.fromiter(graph_corrs, dtype=np.int64)), minlength=size)
    seen = np.flatnonzero(calls)
    total = float(np.cumsum(device_us[seen])[-1])
    by_id = list(names)
    stats = [
        KernelStat(
            name=by_id[i],
            calls=int(calls[i]),
            device_us=float(device_us[i]),
            share=min(float(device_us[i]) / total, 1.0) if total else 0.0,
            graph_calls=int(graphs[i]),
        )
        for i in seen.tolist()
    ]
    return sorted(stats, key=lambda s: s.device_us, reverse=True)


@dataclass
class Windows:
    """Kernels by (device, step window), groups in the order first seen, each group's kernels in
    trace order; window k runs from step k's start to step k+1's, one window (0) without steps;
    kernels before the first step are left out."""

    device: np.ndarray
    window: np.ndarray
    offsets: np.ndarray
    """Group g's kernels are start/end[offsets[g]:offsets[g + 1]]."""
    start: np.ndarray
    end: np.ndarray

    def group(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends of group g's kernels."""
        a, b = self.offsets[g], self.offsets[g + 1]
        return self.start[a:b], self.end[a:b]

    def of_step(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends of the kernels of step window `index`, all devices, groups in order."""
        groups = np.flatnonzero(self.window == index).tolist()
        if not groups:
            return np.zeros(0), np.zeros(0)
        parts = [self.group(g) for g in groups]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def windows_of(k: KernelColumns, step_starts: list[float]) -> Windows:
    """The kernels grouped by device and step window."""
    ts, dur, device, _, _ = _columns(k)
    window = (
        np.searchsorted(np.asarray(step_starts), ts, side="right") - 1
        if step_starts
        else np.zeros(len(ts), dtype=np.int64)
    )
    keep = np.flatnonzero(window >= 0)
    code = device[keep] * (len(step_starts) + 1) + window[keep]
    codes, first, which = np.unique(code, return_index=True, return_inverse=True)
    rank = np.empty(len(codes), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(codes))
    order = keep[np.argsort(rank[which], kind="stable")]
    groups = np.sort(first)
    return Windows(
        device=device[keep[groups]],
        window=window[keep[groups]],
        offsets=np.concatenate([[0], np.cumsum(np.bincount(rank[which], minlength=len(codes)))]),
        start=ts[order],
        end=ts[order] + dur[order],
    )


def device_activity(windows: Windows, launch_us: float) -> DeviceActivity:
    """Busy time, span and idle gaps between kernels, summed over the windows; the default verdict."""
    busy = span = 0.0
    gaps: list[np.ndarray] = []
    durations: list[np.ndarray] = []
    for g in range(len(windows.device)):
        start, end = windows.group(g)
        order = np.lexsort((end, start))
        start, end = start[order], end[order]
        durations.append(end - start)
        w_busy, w_gaps = _merge(start, end)
        busy += w_busy
        span += float(end.max()) - float(start[0])
        gaps.append(w_gaps[w_gaps >= GAP_MIN_US])
    idle_share = min(max((span - busy) / span, 0.0), 1.0) if span > 0 else 0.0
    all_durations = np.concatenate(durations) if durations else np.zeros(0)
    all_gaps = np.concatenate(gaps) if gaps else np.zeros(0)
    median_kernel = _median(all_durations)
    return DeviceActivity(
        kernels=len(all_durations),
        busy_us=busy,
        span_us=span,
        idle_share=idle_share,
        gaps=len(all_gaps),
        median_gap_us=_median(all_gaps),
        median_kernel_us=median_kernel,
        launch_us=launch_us,
        launch_bound=bool(len(all_durations))
        and idle_share >= LAUNCH_BOUND_IDLE_SHARE
        and median_kernel <= LAUNCH_BOUND_MEDIAN_KERNEL_US,
    )


def _median(values: np.ndarray) -> float:
    """`np.median` (0.0 for none; the middle value, or the mean of the two middle ones, as
    statistics.median) without its NaN check, which imports numpy.ma (10-15 ms) on first use:
    durations read from JSON are never NaN."""
    n = len(values)
    if not n:
        return 0.0
    part = np.partition(values, [(n - 1) // 2, n // 2])
    return float(part[n // 2]) if n % 2 else float((part[n // 2 - 1] + part[n // 2]) / 2)


def _merge(start: np.ndarray, end: np.ndarray) -> tuple[float, np.ndarray]:
    """Busy time of sorted intervals (overlaps once) and the idle gaps between them."""
    reach = np.maximum.accumulate(end)
    new = np.flatnonzero(start[1:] > reach[:-1]) + 1  # intervals that open a new busy run
    runs = reach[new - 1] - start[np.concatenate([[0], new[:-1]])]  # every run but the last
    busy = float(np.cumsum(runs)[-1]) if len(runs) else 0.0
    last = new[-1] if len(new) else 0
    return busy + float(reach[-1]) - float(start[last]), start[new] - reach[new - 1]


def step_stats(steps: list[tuple[str, float, float]], windows: Windows) -> list[StepStat]:
    """One StepStat per step marker, in time order, with the kernels of its window."""
    out = []
    for index, (name, _, wall) in enumerate(steps):
        start, end = windows.of_step(index)
        out.append(
            StepStat(
                name=name,
                wall_us=wall,
                kernels=len(start),
                device_us=float(np.cumsum(end - start)[-1]) if len(start) else 0,
            )
        )
    return out
