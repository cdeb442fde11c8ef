"""The nesting of host events, computed on whole columns (numpy) instead of event by event.

Events are in walk order: thread by thread, each thread by start, longer first on ties. A stack
walk (pop the top while it ended at or before the next start, then push) makes the parent of
event i the top of the stack, which is the latest earlier frame of the same thread still open at
i's start: max{j < i : frame[j], end[j] > start[i]}. `parents` finds it for all events at once by
pointer jumping: each event's candidate moves to its candidate's candidate until it is open (every
event skipped on the way ended before the candidate's own start, so before i's). A frame's subtree
is then the contiguous run of events after it (pre-order), which `Tree.after` gives: the index of
the event whose start closes the frame in the stack walk (or the thread's end).
"""

from dataclasses import dataclass

import numpy as np


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
    Every later candidate is a candidate's parent or candidate, so it stays in the thread too."""
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    index = np.arange(n, dtype=np.int64)
    latest = np.maximum.accumulate(np.where(frame, index, -1))
    cand = np.concatenate([[-1], latest[:-1]])
    cand[cand < np.searchsorted(thread, thread, side="left")] = -1  # before the thread's first event
    todo = np.flatnonzero(cand >= 0)
    while todo.size:
        p = cand[todo]
        found = end[p] > start[todo]
        parent[todo[found]] = p[found]
        cand[todo[found]] = p[found]
        todo, p = todo[~found], p[~found]
        up = cand[p]
        cand[todo] = up
        todo = todo[up >= 0]
    return parent


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
    while True:
        hops = np.flatnonzero(up >= 0)
        if not hops.size:
            break
        depth[hops] += depth[up[hops]]
        up[hops] = up[up[hops]]
    # indices in order within each depth (a stable argsort by depth, without its n log n sort)
    levels = [np.flatnonzero(depth == d) for d in range(int(depth.max(initial=0)) + 1)]
    size = np.ones(n, dtype=np.int64)
    for level in reversed(levels[1:]):
        np.add.at(size, parent[level], size[level])
    return Tree(parent=parent, depth=depth, after=np.arange(n) + size, levels=levels)
