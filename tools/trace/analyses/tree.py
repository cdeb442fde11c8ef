"""The nesting of host events, computed on whole columns (numpy) instead of event by event.

Events are in walk order: thread by thread, each thread by start, longer first on ties. A stack
walk (pop the top while it ended at or before the next start, then push) makes the parent of
event i the top of the stack, which is the latest earlier frame of the same thread still open at
i's start: max{j < i : frame[j], end[j] > start[i]}. `parents` finds it for all events at once by
pointer jumping: each event's candidate moves to its candidate's candidate until it is open (every
event skipped on the way ended before the candidate's own start, so before i's). A frame's subtree
is then the contiguous run of events after it (pre-order), which `Tree.after` gives: the index of
the event whose start closes the frame in the stack walk (or the thread's end).

numpy lets go of the GIL while it works on whole columns, so two such computations in two threads
take little more than the longer one (`beside`): the pointer jumping runs on both halves of the
events at once, and the walk (`tools.trace.analyses.walk`) sums its groups beside its step markers.
"""

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

SPLIT_EVENTS = 100_000
"""Events left after the first candidate above which `parents` jumps on two threads."""
A = TypeVar("A")
B = TypeVar("B")


_SOLO = threading.local()


@contextmanager
def one_thread() -> Iterator[None]:
    """Inside, `beside` runs one call after the other: for a process that is one of several
    sharing the cores (a rank file's worker, `tools.trace.ranks.parallel`)."""
    before = getattr(_SOLO, "on", False)
    _SOLO.on = True
    try:
        yield
    finally:
        _SOLO.on = before


def threads_free() -> bool:
    """Whether this process may use a second core: more than one, and not inside `one_thread()`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores > 1 and not getattr(_SOLO, "on", False)


def beside(aside: Callable[[], A], here: Callable[[], B]) -> tuple[A, B]:
    """(aside(), here()): `aside` in a second thread while `here` runs in this one when
    `threads_free()`, else `here` then `aside`; an exception in either is raised here, once both
    have ended."""
    if not threads_free():
        mine = here()
        return aside(), mine
    with ThreadPoolExecutor(1, thread_name_prefix="perfloop-trace-walk") as pool:
        other = pool.submit(aside)
        mine = here()
        return other.result(), mine


def walk_order(start: np.ndarray, dur: np.ndarray, sizes: list[int]) -> np.ndarray:
    """The permutation into walk order of events given thread by thread (`sizes` events each):
    by thread, start, longer first, then given order, as `np.lexsort((-dur, start, thread))`.
    Each thread's events come nearly sorted, so a stable sort by start (timsort: linear on sorted
    runs) does it, 25x faster than the lexsort; only runs of equal starts are ordered by length."""
    order = np.empty(len(start), dtype=np.int64)
    base = 0
    for size in sizes:
        order[base : base + size] = base + np.argsort(start[base : base + size], kind="stable")
        base += size
    ordered = start[order]
    tie = np.zeros(len(order), dtype=bool)
    same = ordered[1:] == ordered[:-1]
    tie[1:] |= same
    tie[:-1] |= same
    if tie.any():  # a tie may span two threads: the lexsort below keeps thread order first
        at = np.flatnonzero(tie)
        sub = order[at]
        thread = np.searchsorted(np.cumsum(sizes), sub, side="right")
        order[at] = sub[np.lexsort((-dur[sub], start[sub], thread))]
    return order


def parents(start: np.ndarray, end: np.ndarray, frame: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Index of each event's parent frame (-1 for none); see the module docstring. Events are in
    walk order (`thread` ascending). The first candidate is the latest frame before the event in
    its own thread (a launch or sync is never a parent; none when the thread has no earlier frame).
    Every later candidate is a candidate's parent or candidate, so it stays in the thread too.

    Above SPLIT_EVENTS, with a second core free, the two halves of the events jump at once
    (`beside`), each writing only its own events' entries. An event of the second half whose
    candidate falls into the first half stops there, and jumps on once the first half is done:
    candidates the first half is still moving would take it back one frame at a time. (Any value
    a candidate ever held is still one: every frame it skips was closed at that event's start, so
    at every later start of the thread; reading one early costs jumps, never a wrong parent.)"""
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    index = np.arange(n, dtype=np.int64)
    latest = np.maximum.accumulate(np.where(frame, index, -1))
    cand = np.concatenate([[-1], latest[:-1]])
    cand[cand < np.searchsorted(thread, thread, side="left")] = -1  # before the thread's first event
    todo = np.flatnonzero(cand >= 0)
    if todo.size > SPLIT_EVENTS and threads_free():
        first, second = todo[: todo.size // 2], todo[todo.size // 2 :]
        later, _ = beside(
            lambda: _jump(second, cand, parent, start, end, floor=int(second[0])),
            lambda: _jump(first, cand, parent, start, end),
        )
        _jump(later, cand, parent, start, end)
    else:
        _jump(todo, cand, parent, start, end)
    return parent


def _jump(
    todo: np.ndarray, cand: np.ndarray, parent: np.ndarray, start: np.ndarray, end: np.ndarray, floor: int = 0
) -> np.ndarray:
    """Move the candidates of the `todo` events until each is open at its event's start (its
    parent) or none is left (no parent); the events whose candidate fell below `floor` are returned
    with it, still to jump."""
    below = []
    while todo.size:
        p = cand[todo]
        found = end[p] > start[todo]
        parent[todo[found]] = p[found]
        cand[todo[found]] = p[found]
        todo, p = todo[~found], p[~found]
        up = cand[p]
        cand[todo] = up
        todo = todo[up >= 0]
        if floor:
            low = cand[todo] < floor
            below.append(todo[low])
            todo = todo[~low]
    return np.concatenate(below) if below else np.zeros(0, dtype=np.int64)


@dataclass
class Tree:
    """Parent, depth, subtree end and levels (indices by depth, shallowest first) of the events."""

    parent: np.ndarray
    depth: np.ndarray
    after: np.ndarray
    levels: list[np.ndarray]


def tree(parent: np.ndarray) -> Tree:
    """Depths by pointer jumping, then subtree sizes bottom-up one depth level at a time."""
    n = len(parent)
    depth = (parent >= 0).astype(np.int64)
    up = parent.copy()
    hops = np.flatnonzero(up >= 0)
    while hops.size:
        above = up[hops]
        depth[hops] += depth[above]
        up[hops] = up[above]
        hops = hops[up[hops] >= 0]
    # indices in order within each depth: a stable argsort of small ints is a radix sort
    counts = np.bincount(depth)
    small = depth.astype(np.uint8 if len(counts) <= 256 else np.int64)
    levels = np.split(np.argsort(small, kind="stable"), np.cumsum(counts)[:-1])
    size = np.ones(n, dtype=np.int64)
    # a subtree is a run of events (the parent of an event between a frame and its descendant is
    # open at it, so it is that frame or one of its descendants), hence the parents of one level
    # ascend: each parent's children are a run, added at once
    for level in reversed(levels[1:]):
        above = parent[level]
        runs = np.flatnonzero(np.concatenate([[True], above[1:] != above[:-1]]))
        size[above[runs]] += np.add.reduceat(size[level], runs)
    return Tree(parent=parent, depth=depth, after=np.arange(n) + size, levels=levels)
