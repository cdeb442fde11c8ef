"""Read `prof.key_averages(...).table(...)` text tables (with or without group_by_input_shape)."""

import gzip
import re
from pathlib import Path

from state.profiling.profile import OpStat, ProfileSummary
from tools.errors import TraceError

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
        raise TraceError(
            f"{source}: expected a key_averages table (a header between dashed lines and "
            "a closing dashed line); got none or a truncated one"
        )
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rules[0]])]
    header = _cells(lines[rules[0] + 1], spans)
    columns = _columns(header, source)
    return [
        op
        for n in range(rules[1] + 1, rules[2])
        if (op := _row(lines[n], spans, columns, f"{source}: line {n + 1}")) is not None
    ]


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
    wanted = {
        "name": "Name",
        "self": f"Self {basis}",
        "pct": f"Self {basis} %",
        "total": f"{basis} total",
        "calls": "# of Calls",
    }
    missing = [title for title in wanted.values() if title not in header]
    if missing:
        raise TraceError(
            f"{source}: key_averages table lacks column(s) {', '.join(missing)}; found {', '.join(header)}"
        )
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
        raise TraceError(
            f"{where}: expected a percentage and a call count, got {pct!r} and {cells[columns['calls']]!r}"
        ) from err
    if name.startswith("ProfilerStep") or share > 1:
        return None
    shapes = cells[columns["shapes"]] if "shapes" in columns else ""
    return OpStat(
        name=name,
        calls=calls,
        share=share,
        self_us=_time_us(cells[columns["self"]], where),
        total_us=_time_us(cells[columns["total"]], where),
        input_dims=_shapes(shapes),
    )


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


_TOTAL = re.compile(r"^Self (\w+) time total: ([0-9.]+\s*(?:us|ms|s))$", re.M)


def read_table_file(path: Path) -> ProfileSummary:
    """A `.txt` or `.txt.gz` key_averages table as a one-step ProfileSummary.

    The total is the table's own `Self CUDA time total` line (else the CPU one); kernel rows are kept
    beside the ops that launched them, as in the table."""
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise TraceError(f"{path}: cannot read the key_averages table ({err}); check the file") from err
    ops = read_key_averages_table(text, str(path))
    totals = {basis: _time_us(value.replace(" ", ""), str(path)) for basis, value in _TOTAL.findall(text)}
    device = next((basis for basis in totals if basis != "CPU"), None)
    total = totals.get(device or "CPU", sum(op.self_us for op in ops))
    return ProfileSummary(
        source=str(path),
        time_basis="device" if device else "cpu",
        steps=1,
        total_self_us=total,
        step_us=total,
        ops=sorted(ops, key=lambda op: op.self_us, reverse=True),
    )
