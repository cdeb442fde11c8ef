"""Every host event of a trace in walk order, nested (`tools.trace.analyses.tree`), with what each
inherits from the frames around it: the innermost operator, whether it sits in the decode path or a
profiler step, the user's code location. `tools.trace.analyses.walk` sums over them.

What an operator's or annotation's name says is computed once per interned key (`KeyFlags`), then
read per event with one gather.
"""

import re
from dataclasses import dataclass

import numpy as np

from tools.trace.analyses.tree import Tree, beside, parents, tree, walk_order
from tools.trace.analyses.windows import marker_kind
from tools.trace.read.collect import ANNOTATION, OP, PYFUNC, SYNC, Collected

STEP_MARKER = "ProfilerStep#"
DECODE_CALL = "forward_decode"
SYNC_OPS = frozenset({"aten::_local_scalar_dense"})
"""Operators that copy a device scalar to the host (`.item()`, `int(t)`, `if t:`): a sync on GPU."""
_PYFRAME = re.compile(r"^(?P<file>.+\.py)\((?P<line>\d+)\): (?P<fn>.+)$")
_LIBRARY = ("torch/", "site-packages/", "dist-packages/", "/lib/python")


def user_location(frame_name: str) -> str | None:
    """`file.py:line (function)` for a Python frame outside torch and installed packages, else None."""
    match = _PYFRAME.match(frame_name)
    if match is None or any(part in match["file"] for part in _LIBRARY):
        return None
    return f"{match['file']}:{match['line']} ({match['fn']})"


@dataclass
class Host:
    """Every host event of every thread in walk order, with what each inherits from its frames."""

    start: np.ndarray
    dur: np.ndarray
    kind: np.ndarray
    payload: np.ndarray
    tree: Tree
    op: np.ndarray
    """Innermost operator among the event and its frames (-1: none)."""
    in_decode: np.ndarray
    in_step: np.ndarray
    location: np.ndarray
    """Index into the locations list (-1: none)."""
    thread: np.ndarray
    """Index of the event's thread."""


class KeyFlags:
    """Per interned key: what its name says (decode call, step marker, sync op, user location)."""

    def __init__(self, names: list[str], locations: list[str]) -> None:
        where = {loc: i for i, loc in enumerate(locations)}
        self.decode = np.array([DECODE_CALL in n for n in names] + [False], dtype=bool)
        self.step = np.array([n.startswith(STEP_MARKER) for n in names] + [False], dtype=bool)
        self.sync_op = np.array([n in SYNC_OPS for n in names] + [False], dtype=bool)
        self.marker = np.array([marker_kind(n) for n in names] + [-1], dtype=np.int64)
        self.location = np.array([where.get(user_location(n) or "", -1) for n in names] + [-1])


def is_frame(kind: np.ndarray) -> np.ndarray:
    """Events pushed on the stack (operators, annotations, Python frames)."""
    return (kind == OP) | (kind == ANNOTATION) | (kind == PYFUNC)


def host_events(col: Collected, flags: KeyFlags) -> Host:
    """All threads' columns in walk order, and the values each event inherits, level by level."""
    times = [np.frombuffer(c.times, dtype=np.float64).reshape(-1, 2) for c in col.threads.values()]
    ints = [np.frombuffer(c.ints, dtype=np.int64).reshape(-1, 2) for c in col.threads.values()]
    thread = np.repeat(np.arange(len(times)), [len(t) for t in times])
    t = times[0] if len(times) == 1 else np.concatenate(times) if times else np.zeros((0, 2))
    i = ints[0] if len(ints) == 1 else np.concatenate(ints) if ints else np.zeros((0, 2), dtype=np.int64)
    order = walk_order(t[:, 0], t[:, 1], [len(x) for x in times])
    (start, dur), (kind, payload, thread) = beside(
        lambda: (t[order, 0], t[order, 1]), lambda: (i[order, 0], i[order, 1], thread[order])
    )
    frame = is_frame(kind)
    shape = parents(start, start + dur, frame, thread)
    nested = tree(shape)
    keyed = np.where(frame | (kind == SYNC), payload, -1)  # -1: the flags' last row, all false
    levels = [(level, shape[level]) for level in nested.levels[1:]]

    def innermost() -> tuple[np.ndarray, np.ndarray]:
        """The innermost operator and user code location around each event."""
        op = np.where(kind == OP, np.arange(len(start)), -1)
        location = np.where(kind == PYFUNC, flags.location[keyed], -1)
        for level, up in levels:
            op[level] = np.where(op[level] >= 0, op[level], op[up])
            location[level] = np.where(location[level] >= 0, location[level], location[up])
        return op, location

    def inside() -> tuple[np.ndarray, np.ndarray]:
        """Whether each event sits in a decode call, and in a profiler step."""
        in_decode, in_step = flags.decode[keyed].copy(), flags.step[keyed] & (kind == ANNOTATION)
        for level, up in levels:
            in_decode[level] |= in_decode[up]
            in_step[level] |= in_step[up]
        return in_decode, in_step

    (op, location), (in_decode, in_step) = beside(innermost, inside)
    return Host(start, dur, kind, payload, nested, op, in_decode, in_step, location, thread)
