"""The stack walk `tools.trace.analyses.walk` replaced (event by event, in Python), kept as the reference its
vectorized walk must equal: tests/unit/test_trace_walk.py compares them on random traces.

Nest each host thread's events by time and attribute device time, CPU time and syncs to operators.

A launch's kernels (joined by correlation id) count as device self time of the innermost operator
open around the launch, and as total time of every operator around that; kernels replayed by
cudaGraphLaunch go to a `CUDA graph` row. Kernels whose launch is not inside any operator keep
their own name. Syncs are counted with their caller and whether they sat inside the decode path.
"""

from dataclasses import dataclass

from tools.trace.analyses.host import DECODE_CALL, STEP_MARKER, SYNC_OPS, user_location
from tools.trace.analyses.walk import GRAPH_ROW, Walked
from tools.trace.read.collect import ANNOTATION, GRAPH_LAUNCH, LAUNCH, OP, PYFUNC, SYNC, Collected


@dataclass(slots=True)
class _Frame:
    """A host event open during the walk of one thread."""

    key: int
    kind: int
    end_us: float
    dur_us: float
    op: "_Frame | None"
    in_decode: bool
    in_step: bool
    location: str | None
    syncs: bool = False
    children_us: float = 0.0
    device_self_us: float = 0.0
    device_total_us: float = 0.0


def walk(col: Collected, work: dict[int, float]) -> Walked:
    """Walk every host thread; `work` (correlation -> kernel time) is consumed as launches are met."""
    out = Walked(on_device=bool(work))
    graph_key = col.intern((GRAPH_ROW, (), ()))
    for cols in col.threads.values():
        ts, dur, kind, payload = cols.times[0::2], cols.times[1::2], cols.ints[0::2], cols.ints[1::2]
        order = sorted(range(len(ts)), key=dur.__getitem__, reverse=True)  # parents first on ties
        order.sort(key=ts.__getitem__)
        stack: list[_Frame] = []
        for i in order:
            start = ts[i]
            while stack and stack[-1].end_us <= start:
                _close(stack.pop(), stack, out)
            k, parent = kind[i], (stack[-1] if stack else None)
            if k in (LAUNCH, GRAPH_LAUNCH):
                _launch(payload[i], k == GRAPH_LAUNCH, parent, work, out, graph_key)
            elif k == SYNC:
                _sync(col.key_list[payload[i]][0], parent, dur[i], out, col.key_list)
            else:
                stack.append(_open(col, payload[i], k, start, dur[i], parent, out))
        while stack:
            _close(stack.pop(), stack, out)
    return out


def _open(
    col: Collected, key: int, kind: int, start: float, dur: float, parent: _Frame | None, out: Walked
) -> _Frame:
    """A frame for a host event; counts step markers and outermost decode calls on the way."""
    name = col.key_list[key][0]
    decode = DECODE_CALL in name
    frame = _Frame(
        key=key,
        kind=kind,
        end_us=start + dur,
        dur_us=dur,
        op=None,
        in_decode=decode or bool(parent and parent.in_decode),
        in_step=bool(parent and parent.in_step),
        location=parent.location if parent else None,
    )
    if parent is not None:
        parent.children_us += dur
        frame.op = parent.op
    if kind == OP:
        frame.op = frame
        frame.syncs = name in SYNC_OPS
        if frame.syncs and not (parent and parent.op and parent.op.syncs):
            _sync(name, parent, dur, out, col.key_list)
    elif kind == PYFUNC:
        frame.location = user_location(name) or frame.location
    elif kind == ANNOTATION and name.startswith(STEP_MARKER):
        frame.in_step = True
        out.steps.append((name, start, dur))
    if decode and not (parent and parent.in_decode):
        out.decode_calls += 1
    return frame


def _launch(
    corr: int, graph: bool, parent: _Frame | None, work: dict[int, float], out: Walked, graph_key: int
) -> None:
    """Give a launch's device time to the innermost enclosing op (or the CUDA graph row)."""
    owner = parent.op if parent else None
    if corr not in work or (owner is None and not graph):
        return
    dur = work.pop(corr)
    if graph:
        out.add(graph_key, dur, dur, parent.location if parent else None)
    elif owner is not None:
        owner.device_self_us += dur
    if owner is not None:
        owner.device_total_us += dur


def _sync(name: str, parent: _Frame | None, dur: float, out: Walked, names: list) -> None:
    """Count one host-device sync under its caller; a sync call inside a sync op is that op's own."""
    if parent is not None and parent.op is not None and parent.op.syncs and name not in SYNC_OPS:
        return
    op = parent.op if parent is not None else None
    if op is not None and op.syncs:
        op = None
    caller = (parent.location if parent else None) or (names[op.key][0] if op else "-")
    row = out.syncs.setdefault((name, caller), [0, 0, 0, 0.0])
    row[0] += 1
    row[1] += bool(parent and parent.in_decode)
    row[2] += bool(parent and parent.in_step)
    row[3] += dur


def _close(frame: _Frame, stack: list[_Frame], out: Walked) -> None:
    """Pass a finished frame's device time up to the enclosing frame; count it if it is an op."""
    if stack:
        stack[-1].device_total_us += frame.device_total_us
    if frame.kind != OP:
        return
    if out.on_device:
        out.add(frame.key, frame.device_self_us, frame.device_total_us, frame.location)
    else:
        out.add(frame.key, max(frame.dur_us - frame.children_us, 0.0), frame.dur_us, frame.location)
