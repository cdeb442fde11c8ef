"""Read torch.profiler output: Chrome traces (`export_chrome_trace`) and key_averages tables.

Loading (`load_trace_events`) is kept apart from the event walk (`summarize_events`) so that a
streaming loader for multi-GB traces can replace the former without touching the latter.
"""

import gzip
import json
import re
import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from state.profile import OpStat, ProfileSummary
from tools.errors import TraceError

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
HOST_CATS = frozenset({"cpu_op", "user_annotation"})
STEP_MARKER = "ProfilerStep#"
DECODE_CALL = "forward_decode"

DimsKey = tuple[tuple[int, ...], ...]


def read_chrome_trace(path: str | Path, steps: int | None = None) -> ProfileSummary:
    """Summarize a `.json` or `.json.gz` Chrome trace; `steps` overrides the counted decode steps."""
    return summarize_events(load_trace_events(Path(path)), str(path), steps)


def load_trace_events(path: Path) -> list[dict]:
    """The trace's `traceEvents` list; TraceError naming the file if it is missing or malformed."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise TraceError(f"{path}: cannot read the trace ({err.strerror}); check the path") from err
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as err:
            raise TraceError(f"{path}: gzip data is truncated or corrupt ({err}); "
                             "re-export the trace") from err
    if not raw.strip():
        raise TraceError(f"{path}: file is empty; expected a torch.profiler Chrome trace (JSON)")
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as err:
        raise TraceError(f"{path}: invalid JSON at byte offset {err.pos} ({err.msg}); "
                         "the trace is truncated or not a Chrome trace") from err
    except UnicodeDecodeError as err:
        raise TraceError(f"{path}: not UTF-8 text at byte offset {err.start}; "
                         "expected a torch.profiler Chrome trace (JSON)") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{path}: expected a JSON object with a 'traceEvents' list "
                         "(torch.profiler export_chrome_trace output)")
    return doc["traceEvents"]


@dataclass
class _Frame:
    """A host event open during the walk of one thread."""

    name: str
    is_op: bool
    end_us: float
    dur_us: float
    dims: DimsKey = ()
    types: tuple[str, ...] = ()
    op: "_Frame | None" = None
    in_decode: bool = False
    children_us: float = 0.0
    device_self_us: float = 0.0
    device_total_us: float = 0.0


@dataclass
class _Group:
    """Running sums for one (name, dims) group, on the walk's time basis."""

    types: tuple[str, ...]
    calls: int = 0
    self_us: float = 0.0
    total_us: float = 0.0


@dataclass
class _Walk:
    """Everything accumulated over the walk of all threads."""

    device_work: dict[int, tuple[str, float]]
    on_device: bool
    groups: dict[tuple[str, DimsKey], _Group] = field(default_factory=dict)
    step_markers: set[str] = field(default_factory=set)
    decode_calls: int = 0

    def add(self, name: str, dims: DimsKey, types: tuple[str, ...], self_us: float, total_us: float) -> None:
        """Count one call into its (name, dims) group."""
        group = self.groups.setdefault((name, dims), _Group(types=types))
        group.calls += 1
        group.self_us += self_us
        group.total_us += total_us


def summarize_events(events: Iterable[dict], source: str, steps: int | None = None) -> ProfileSummary:
    """Group host ops by (name, input dims), with device time when kernels were recorded."""
    events = list(events)
    work = _device_work(events)
    walk = _Walk(device_work=work, on_device=bool(work))
    for thread in _host_threads(events).values():
        thread.sort(key=lambda e: (e["ts"], -e.get("dur", 0.0)))
        _walk_thread(thread, walk)
    for name, dur in walk.device_work.values():
        walk.add(name, (), (), dur, dur)
    ops = _op_stats(walk.groups)
    total_us = sum(op.self_us for op in ops)
    step_count = steps or len(walk.step_markers) or walk.decode_calls or 1
    return ProfileSummary(source=source, time_basis="device" if walk.on_device else "cpu", steps=step_count,
                          total_self_us=total_us, step_us=total_us / step_count, ops=ops)


def _device_work(events: list[dict]) -> dict[int, tuple[str, float]]:
    """Device time per launch correlation id, with the first kernel's name."""
    work: dict[int, tuple[str, float]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS:
            corr = e.get("args", {}).get("correlation", -1)
            name, dur = work.get(corr, (e["name"], 0.0))
            work[corr] = (name, dur + e.get("dur", 0.0))
    return work


def _host_threads(events: list[dict]) -> dict[tuple, list[dict]]:
    """Host ops, annotations and launch calls, per (pid, tid)."""
    threads: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in HOST_CATS | LAUNCH_CATS:
            threads[(e.get("pid"), e.get("tid"))].append(e)
    return threads


def _walk_thread(thread: list[dict], walk: _Walk) -> None:
    """Nest one thread's time-sorted events with a stack; close each frame when time passes its end."""
    stack: list[_Frame] = []
    for e in thread:
        while stack and stack[-1].end_us <= e["ts"]:
            _close(stack.pop(), stack, walk)
        if e["cat"] in LAUNCH_CATS:
            _attribute_launch(e, stack, walk)
            continue
        frame = _open(e, stack[-1] if stack else None, walk)
        if stack:
            stack[-1].children_us += frame.dur_us
        stack.append(frame)
    while stack:
        _close(stack.pop(), stack, walk)


def _open(e: dict, parent: _Frame | None, walk: _Walk) -> _Frame:
    """A frame for a host event; counts step markers and outermost decode calls on the way."""
    name, dur, args = e["name"], e.get("dur", 0.0), e.get("args", {})
    is_op = e["cat"] == "cpu_op"
    frame = _Frame(name=name, is_op=is_op, end_us=e["ts"] + dur, dur_us=dur,
                   dims=_dims_key(args.get("Input Dims", [])), types=tuple(args.get("Input type", [])),
                   in_decode=DECODE_CALL in name or bool(parent and parent.in_decode))
    frame.op = frame if is_op else (parent.op if parent else None)
    if name.startswith(STEP_MARKER):
        walk.step_markers.add(name)
    elif DECODE_CALL in name and not (parent and parent.in_decode):
        walk.decode_calls += 1
    return frame


def _dims_key(dims: list) -> DimsKey:
    """Input dims as a hashable key; lists of tensors (nested lists) become () as in key_averages."""
    return tuple(tuple(d) if all(isinstance(x, int) for x in d) else () for d in dims)


def _attribute_launch(e: dict, stack: list[_Frame], walk: _Walk) -> None:
    """Give a launch's device time to the innermost enclosing op; leave it unattributed if none."""
    owner = stack[-1].op if stack else None
    corr = e.get("args", {}).get("correlation", -1)
    if owner is not None and corr in walk.device_work:
        dur = walk.device_work.pop(corr)[1]
        owner.device_self_us += dur
        owner.device_total_us += dur


def _close(frame: _Frame, stack: list[_Frame], walk: _Walk) -> None:
    """Pass a finished frame's device time up to the enclosing frame; count it if it is an op."""
    if stack:
        stack[-1].device_total_us += frame.device_total_us
    if not frame.is_op:
        return
    if walk.on_device:
        walk.add(frame.name, frame.dims, frame.types, frame.device_self_us, frame.device_total_us)
    else:
        cpu_self_us = max(frame.dur_us - frame.children_us, 0.0)
        walk.add(frame.name, frame.dims, frame.types, cpu_self_us, frame.dur_us)


def _op_stats(groups: dict[tuple[str, DimsKey], _Group]) -> list[OpStat]:
    """One OpStat per group that took any time, heaviest first."""
    busy = {key: g for key, g in groups.items() if g.total_us > 0}
    total_us = sum(g.self_us for g in busy.values())
    ops = [OpStat(name=name, calls=g.calls, self_us=g.self_us, total_us=g.total_us,
                  share=min(g.self_us / total_us, 1.0) if total_us else 0.0,
                  input_dims=[list(d) for d in dims], input_types=list(g.types))
           for (name, dims), g in busy.items()]
    return sorted(ops, key=lambda op: op.self_us, reverse=True)


_UNIT_US = {"us": 1.0, "ms": 1e3, "s": 1e6}
_TIME = re.compile(r"^([0-9.]+)\s*(us|ms|s)$")
_INNER_LIST = re.compile(r"\[([0-9, ]*)\]")
_DEVICE_SELF = re.compile(r"^Self (?!CPU$)(\w+)$")


def read_key_averages_table(text: str, source: str = "key_averages table") -> list[OpStat]:
    """Parse `prof.key_averages(...).table(...)` text; device columns win over CPU ones when present.

    Rows named ProfilerStep* and rows above 100% (annotations spanning many kernels) are skipped.
    The table lists kernels beside the ops that launched them; both rows are returned.
    """
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"-", " "}]
    if len(rules) < 3 or rules[1] != rules[0] + 2:
        raise TraceError(f"{source}: expected a key_averages table (a header between dashed lines and "
                         "a closing dashed line); got none or a truncated one")
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rules[0]])]
    header = _cells(lines[rules[0] + 1], spans)
    columns = _columns(header, source)
    return [op for n in range(rules[1] + 1, rules[2])
            if (op := _row(lines[n], spans, columns, f"{source}: line {n + 1}")) is not None]


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    """A row's cells: split on runs of 2+ spaces (a title or value wider than its column shifts the
    rest right), else cut at the dashed line's columns (the last runs to the end of the line)."""
    parts = re.split(r"\s{2,}", line.strip())
    if len(parts) == len(spans):
        return parts
    return [(line[a:] if (a, b) == spans[-1] else line[a:b]).strip() for a, b in spans]


def _columns(header: list[str], source: str) -> dict[str, int]:
    """Indexes of the columns we read: device ones (Self CUDA, ...) if any, else the CPU ones."""
    device = next((m.group(1) for h in header if (m := _DEVICE_SELF.match(h))), None)
    basis = device or "CPU"
    wanted = {"name": "Name", "self": f"Self {basis}", "pct": f"Self {basis} %",
              "total": f"{basis} total", "calls": "# of Calls"}
    missing = [title for title in wanted.values() if title not in header]
    if missing:
        raise TraceError(f"{source}: key_averages table lacks column(s) {', '.join(missing)}; "
                         f"found {', '.join(header)}")
    found = {key: header.index(title) for key, title in wanted.items()}
    if "Input Shapes" in header:
        found["shapes"] = header.index("Input Shapes")
    return found


def _row(line: str, spans: list[tuple[int, int]], columns: dict[str, int], where: str) -> OpStat | None:
    """One table row as an OpStat; None for step markers and annotation rows above 100%."""
    cells = _cells(line, spans)
    name, pct = cells[columns["name"]], cells[columns["pct"]]
    try:
        share = round(float(pct.rstrip("%")) / 100, 6)
        calls = int(cells[columns["calls"]])
    except ValueError as err:
        raise TraceError(f"{where}: expected a percentage and a call count, got {pct!r} and "
                         f"{cells[columns['calls']]!r}") from err
    if name.startswith("ProfilerStep") or share > 1:
        return None
    shapes = cells[columns["shapes"]] if "shapes" in columns else ""
    return OpStat(name=name, calls=calls, share=share,
                  self_us=_time_us(cells[columns["self"]], where),
                  total_us=_time_us(cells[columns["total"]], where),
                  input_dims=_shapes(shapes))


def _shapes(cell: str) -> list[list[int]]:
    """`[[495552, 1, 576], []]` as lists; a cell torch cut short with `...` keeps its complete lists."""
    inner = cell.removeprefix("[").removesuffix("]")
    return [[int(x) for x in dims.split(",") if x.strip()] for dims in _INNER_LIST.findall(inner)]


def _time_us(cell: str, where: str) -> float:
    """A table time such as `59.482ms` in microseconds."""
    match = _TIME.match(cell)
    if not match:
        raise TraceError(f"{where}: expected a time like 12.3us, 4.5ms or 1.2s, got {cell!r}")
    return float(match.group(1)) * _UNIT_US[match.group(2)]
