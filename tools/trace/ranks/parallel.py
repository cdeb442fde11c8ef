"""Read traces on every core: one process per rank file, or one large plain-JSON file cut into
byte ranges (`tools.trace.read.split`) whose collected columns are merged before the walk.

Each worker streams its file or range in bounded memory (`tools.trace.read.stream`) and sends back only
the compact columns (`Collected`) or the finished summary; the merge renumbers the interned op and
kernel names of each range after the first, in file order, so the merged columns are those one
stream over the whole file gives.
"""

import multiprocessing
import os
import threading
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import TypeVar

import numpy as np

from state.profiling.profile import ProfileSummary
from tools.errors import TraceError
from tools.trace.analyses.summary import summarize as summarize_trace
from tools.trace.analyses.tree import one_thread
from tools.trace.ranks import handoff
from tools.trace.read.collect import GRAPH_LAUNCH, LAUNCH, Collected
from tools.trace.read.heap import kept_heap
from tools.trace.read.split import byte_ranges
from tools.trace.read.stream import TraceStream

SPLIT_MIN_BYTES = 64 << 20
"""A plain file smaller than this is read in one stream (a worker's start-up would cost more)."""
PARALLEL_MIN_BYTES = 16 << 20
"""Rank files together smaller than this are read one after the other in this process."""
T = TypeVar("T")
R = TypeVar("R")


def workers() -> int:
    """Processes to use: $PERFLOOP_TRACE_WORKERS, else the cores this process may run on."""
    raw = os.environ.get("PERFLOOP_TRACE_WORKERS", "")
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise TraceError(f"PERFLOOP_TRACE_WORKERS must be a whole number >= 1, not {raw!r}")
        return int(raw)
    usable = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere every core
    return len(usable(0)) if usable else os.cpu_count() or 1


def collect(path: Path, start: int = 0, end: int | None = None) -> Collected:
    """One stream over the file (or the byte range) into columns."""
    stream = TraceStream(path, start=start, end=end)
    col = Collected()
    with kept_heap():
        for batch in stream.batches():
            col.add(batch)
    col.device_names = stream.device_names
    return col


def read_trace(path: Path, steps: int | None = None, jobs: int = 1) -> ProfileSummary:
    """One trace's summary; a plain file of SPLIT_MIN_BYTES or more is cut into `jobs` ranges
    collected in parallel (read again in one stream if a cut turns out to be inside a string)."""
    with kept_heap():
        return _read_trace(path, steps, jobs)


def _read_trace(path: Path, steps: int | None, jobs: int) -> ProfileSummary:
    col = None
    if jobs > 1 and _plain(path) and _size(path) >= SPLIT_MIN_BYTES:
        ranges = byte_ranges(path, jobs)
        if len(ranges) > 1:
            try:
                col = merge_collected(_collect_ranges(path, ranges))
            except TraceError:
                col = None
    return summarize_trace(col or collect(path), str(path), steps)


def _collect_ranges(path: Path, ranges: list[tuple[int, int | None]]) -> list[Collected]:
    """Each range's columns: the first here, the others in a worker each, their columns handed
    back through a memfd each where workers are forked (`tools.trace.ranks.handoff`)."""
    context = _context()
    fds = (
        [handoff.new_file() for _ in ranges[1:]]
        if handoff.can_share(context.get_start_method() == "fork")
        else []
    )
    try:
        items = [
            (path, start, end, fds[n - 1] if fds and n else None) for n, (start, end) in enumerate(ranges)
        ]
        parts = _map_first_here(_collect_range, items, context)
        return [
            handoff.take(col, sizes, fd) if fd is not None else col
            for (col, sizes), (*_, fd) in zip(parts, items, strict=True)
        ]
    finally:
        for fd in fds:
            os.close(fd)


def read_traces(paths: Sequence[Path], steps: int | None, jobs: int) -> list[ProfileSummary]:
    """The summaries of several traces (one per rank), one process per file, in the given order."""
    if jobs > 1 and len(paths) > 1 and sum(_size(p) for p in paths) >= PARALLEL_MIN_BYTES:
        return _map(_read_one, [(p, steps) for p in paths], jobs)
    return [read_trace(p, steps, jobs) for p in paths]


def _read_one(args: tuple[Path, int | None]) -> ProfileSummary:
    with one_thread():  # the other workers have the other cores
        return read_trace(*args)


def _collect_range(args: tuple[Path, int, int | None, int | None]) -> tuple[Collected, list[int]]:
    """A range's columns; with a file descriptor, the arrays written to it (`handoff.put`)."""
    path, start, end, fd = args
    col = collect(path, start, end)
    return col, handoff.put(col, fd) if fd is not None else []


def _context() -> BaseContext:
    """How workers start: forked (fast) when every other thread of this process is a daemon helper
    (such as rich's progress refresher, which the workers never touch), else from a fork server:
    forking while application threads hold locks is unsafe."""
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    return multiprocessing.get_context("fork" if all(t.daemon for t in others) else "forkserver")


def _map(fn: Callable[[T], R], items: list[T], jobs: int) -> list[R]:
    """fn over items in worker processes, results in order."""
    with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=_context()) as pool:
        return list(pool.map(fn, items))


def _map_first_here(fn: Callable[[T], R], items: list[T], context: BaseContext) -> list[R]:
    """fn over items, results in order: the first in this process (which would otherwise wait),
    the others meanwhile in one worker each (a fork and the return of one result fewer)."""
    with ProcessPoolExecutor(max_workers=len(items) - 1, mp_context=context) as pool:
        rest = [pool.submit(fn, item) for item in items[1:]]
        first = fn(items[0])
        return [first, *(f.result() for f in rest)]


def _plain(path: Path) -> bool:
    """A readable file, not gzip (a gzip stream cannot be entered at a byte offset); an unreadable
    one is left to the stream, which says why."""
    try:
        with path.open("rb") as raw:
            return raw.read(2) != b"\x1f\x8b"
    except OSError:
        return False


def merge_collected(parts: Sequence[Collected]) -> Collected:
    """The columns of consecutive ranges of one file, as one stream over the file collects them."""
    out = parts[0]
    for part in parts[1:]:
        keys = np.array([out.intern(key) for key in part.key_list] or [0], dtype=np.int64)
        for thread, cols in part.threads.items():
            ints = np.frombuffer(cols.ints, dtype=np.int64).reshape(-1, 2).copy()
            named = (ints[:, 0] != LAUNCH) & (ints[:, 0] != GRAPH_LAUNCH)  # payload: an interned key
            ints[named, 1] = keys[ints[named, 1]]
            mine = out.threads.get(thread)
            if mine is None:
                mine = out.threads[thread] = type(cols)()
            mine.times.extend(cols.times)
            mine.ints.extend(array("q", ints.tobytes()))
        names = np.array(
            [out.kernel_names.setdefault(n, len(out.kernel_names)) for n in part.kernel_names] or [0],
            dtype=np.int64,
        )
        ints = np.frombuffer(part.kernels.ints, dtype=np.int64).reshape(-1, 3).copy()
        ints[:, 2] = names[ints[:, 2]]
        out.kernels.times.extend(part.kernels.times)
        out.kernels.ints.extend(array("q", ints.tobytes()))
        out.graph_corrs |= part.graph_corrs
        out.device_names += part.device_names
        out.events += part.events
        out.cuda_api_calls += part.cuda_api_calls
    return out


def _size(path: Path) -> int:
    """The file's size, 0 if it cannot be read (the stream then says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
