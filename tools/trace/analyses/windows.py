"""Decode-step windows of one trace: from whichever step marker it carries, else from the repetition
of its work (kernels on a GPU trace, outermost operators on a CPU trace).

Markers, in the order they are preferred (`MARKERS`):
- `ProfilerStep#N`: torch.profiler's `prof.step()` (perfloop's hook, any scheduled profile);
- `step[DECODE bs=N]`: SGLang's span around each forward of its model runner
  (`profile_utils.build_step_span_name`; `draft step[...]` of speculative decoding is not counted);
- `forward_decode`: an annotation or a Python frame of that name (the demo server's scheduler,
  SGLang's `ModelRunner.forward_decode` in traces recorded with stacks, its default), outermost only;
- `execute_context_0(0)_generation_<m>(<tok>)`: vLLM V1's span around each pure-decode step of its
  model runner (`execute_model`: preprocess, forward, postprocess; steps with prompt tokens, named
  `execute_context_<n>(<tok>)_...` with n > 0, are not counted), the CPU runner's too;
- `gpu_model_runner: forward`: vLLM V1's span around each forward of its GPU model runner
  (`VLLM_CUSTOM_SCOPES_FOR_PROFILING=1`; the `gpu_` prefix on CPU too).
A window runs from one marker's start to the next one's (the last: the marker's own duration), so
it holds everything the step costs the server, scheduling included; a ProfilerStep is that already.

Without markers, a step is the shortest stretch after which the sequence of work repeats: a name
that occurs the same number of times as there are steps, at an (almost) constant distance, and the
longest such distance is the step (a per-layer name recurs at the layer's distance, with a longer
gap at each step's head and tail). The window's boundary is where the device (or host) waited
longest within each period: between one step's sampling and the next step's first kernel.
"""

import re
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from tools.trace.read.collect import GRAPH_LAUNCH, LAUNCH, Collected

MARKERS: list[tuple[str, re.Pattern[str]]] = [
    ("ProfilerStep", re.compile(r"^ProfilerStep#")),
    ("SGLang step[DECODE]", re.compile(r"^step\[DECODE\b")),
    ("forward_decode", re.compile(r"forward_decode")),
    ("vLLM execute_context_0(0)", re.compile(r"^execute_context_0\(0\)_generation_[1-9]\d*\(\d+\)$")),
    ("vLLM gpu_model_runner: forward", re.compile(r"^gpu_model_runner: forward$")),
]
"""(label, name pattern) of each step marker, preferred first."""
LONG_WAIT = 4.0
"""A period that starts after this many times the typical wait (and 1 us) starts a step."""
SPACING_TOLERANCE = 0.1
"""A repeating name's distances may differ by this fraction and still mark one step each."""


@dataclass
class StepWindows:
    """Host time windows, one per decode step, and what found them."""

    source: str
    """The marker's label, `kernel pattern`, `operator pattern` or `whole trace / N`."""
    steps: list[tuple[str, float, float]]
    """(name, host start, wall) of each window, in time order, in us."""
    count: int
    """Decode steps in the trace (the windows may be one fewer: a partial step at an end)."""
    tail: float | None = None
    """Kernels starting from here on belong to no window (after the last inferred boundary)."""
    per: int = 1
    """Steps in each window (only `whole trace / N` has more than one)."""
    layers: int | None = None
    """Repetitions of the per-layer pattern in one step, where found from the pattern."""


def marker_kind(name: str) -> int:
    """Index in MARKERS of the marker this event name is, -1 if none."""
    return next((i for i, (_, pattern) in enumerate(MARKERS) if pattern.search(name)), -1)


def marked(marks: dict[int, list[tuple[str, float, float]]]) -> StepWindows | None:
    """The windows of the preferred marker kind the trace carries; None without any."""
    for kind, (label, _) in enumerate(MARKERS):
        found = sorted(marks.get(kind, []), key=lambda m: m[1])
        if not found:
            continue
        if label == "ProfilerStep":
            return StepWindows(label, found, len(found))
        walls = [b[1] - a[1] for a, b in pairwise(found)] + [found[-1][2]]
        steps = [
            (f"{name} #{n}", start, wall)
            for n, ((name, start, _), wall) in enumerate(zip(found, walls, strict=True), 1)
        ]
        return StepWindows(label, steps, len(found))
    return None


def repeats(
    names: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[list[int], int, int | None] | None:
    """(indices where steps begin, steps seen, per-layer repetitions) of a sequence of work in time
    order, or None when no name recurs at a constant distance over most of it."""
    n = len(names)
    if n < 6:
        return None
    _, inverse, counts = np.unique(names, return_inverse=True, return_counts=True)
    order = np.argsort(inverse, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(counts)])
    best: tuple[tuple[float, int], np.ndarray] | None = None
    for u in np.flatnonzero(counts >= 3).tolist():
        pos = order[offsets[u] : offsets[u + 1]]
        d = np.diff(pos)
        if d.min() < 2 or d.max() > (1 + SPACING_TOLERANCE) * d.min():
            continue
        period = float(np.median(d))
        if period * len(pos) < 0.5 * n:
            continue
        if best is None or (period, len(pos)) > best[0]:
            best = ((period, len(pos)), pos)
    if best is None:
        return None
    pos = best[1].tolist()
    waited = start - np.concatenate([[-np.inf], np.maximum.accumulate(end)[:-1]])
    cuts = [a + 1 + int(np.argmax(waited[a + 1 : b + 1])) for a, b in pairwise(pos)]
    if len({int(names[c]) for c in cuts}) > 1:  # no common place where the work waits: the anchor
        cuts = pos
    count, layers = len(pos), None
    group = _steps_of_periods(waited[cuts])
    if group is not None:  # the repeating unit was a layer: steps are `m` of them
        phase, m = group
        cuts, count, layers = cuts[phase::m], max(round(count / m), 1), m
    else:
        per_step = Counter(c // count for c in counts.tolist() if c > count and c % count == 0)
        layers = per_step.most_common(1)[0][0] if per_step else None
    return cuts, count, layers


def _steps_of_periods(waited: np.ndarray) -> tuple[int, int] | None:
    """(first, m) when the periods starting every m-th one all waited far longer than the typical
    period (a step of m identical layers, with no kernel of its own); None otherwise. The wait
    before the first period is unknown (the trace starts there) and left out. The m tried are the
    distances between nearby long waits, so the search stays linear in the periods."""
    w = np.where(np.isfinite(waited), waited, np.nan)
    if np.isfinite(w).sum() < 3:
        return None
    threshold = LONG_WAIT * max(float(np.nanmedian(w)), 1.0)
    long = np.flatnonzero(w > threshold)
    if len(long) < 2 or len(long) * 2 > len(w):
        return None
    near = {int(b - a) for k in range(1, 5) for a, b in zip(long[:-k], long[k:], strict=True)}
    best: tuple[float, int, int] | None = None
    for m in sorted(d for d in near if d >= 2)[:32]:
        for phase in sorted({int(i) % m for i in long}):
            at = w[phase::m]
            if np.isfinite(at).sum() < 2:
                continue
            score = float(np.nanmin(at))
            if best is None or score > best[0]:
                best = (score, phase, m)
    if best is None or best[0] <= threshold:
        return None
    return best[1], best[2]


def inferred(col: Collected, top_ops: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> StepWindows | None:
    """Windows from the repeating kernels (first device) or, on a CPU trace, the busiest thread's
    outermost operators; None when nothing repeats."""
    if col.kernels.times:
        times = np.frombuffer(col.kernels.times, dtype=np.float64)
        ints = np.frombuffer(col.kernels.ints, dtype=np.int64)
        device, corr, name = ints[0::3], ints[1::3], ints[2::3]
        mine = np.flatnonzero(device == np.bincount(device - device.min()).argmax() + device.min())
        mine = mine[np.argsort(times[0::2][mine], kind="stable")]
        start, end = times[0::2][mine], times[0::2][mine] + times[1::2][mine]
        found = repeats(name[mine], start, end)
        if found is None:
            return None
        cuts, count, layers = found
        host = _launch_starts(col, corr[mine][cuts], start[cuts])
        source, last = "kernel pattern", float(start[cuts[-1]])
    elif top_ops is not None:
        keys, start, end = top_ops
        found = repeats(keys, start, end)
        if found is None:
            return None
        cuts, count, layers = found
        host, source = start[cuts], "operator pattern"
        last = float(host[-1])
    else:
        return None
    steps = [(f"step {n}", float(a), float(b - a)) for n, (a, b) in enumerate(pairwise(host.tolist()), 1)]
    if not steps:
        return None
    return StepWindows(source, steps, count, tail=last, layers=layers)


def whole(col: Collected, steps: int) -> StepWindows | None:
    """The whole trace as one window of `steps` steps (the user's count, nothing marked or repeating)."""
    spans = [np.frombuffer(c.times, dtype=np.float64).reshape(-1, 2) for c in col.threads.values()]
    t = np.concatenate(spans) if spans else np.zeros((0, 2))
    if not len(t):
        return None
    first, last = float(t[:, 0].min()), float((t[:, 0] + t[:, 1]).max())
    return StepWindows(f"whole trace / {steps}", [("whole trace", first, last - first)], steps, per=steps)


def _launch_starts(col: Collected, corrs: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Host start of the launch of each correlation id (the kernel's own start where none)."""
    starts, ids = [], []
    for c in col.threads.values():
        ints = np.frombuffer(c.ints, dtype=np.int64).reshape(-1, 2)
        launch = (ints[:, 0] == LAUNCH) | (ints[:, 0] == GRAPH_LAUNCH)
        starts.append(np.frombuffer(c.times, dtype=np.float64)[0::2][launch])
        ids.append(ints[launch, 1])
    if not starts:
        return fallback
    s, i = np.concatenate(starts), np.concatenate(ids)
    order = np.argsort(i, kind="stable")
    s, i = s[order], i[order]
    slot = np.minimum(np.searchsorted(i, corrs), max(len(i) - 1, 0))
    has = (i[slot] == corrs) & (corrs >= 0) if len(i) else np.zeros(len(corrs), dtype=bool)
    return np.where(has, s[slot] if len(i) else fallback, fallback)
