"""Cut one plain-JSON trace into byte ranges at event boundaries, so that several processes can
decode it at once (`tools.trace.ranks.parallel`).

A cut is the first byte (`{`) of an event at the depth of the `traceEvents` list. From a nominal
offset, each `}` `,` `{` candidate after it is tried in turn and accepted only if the text from its
`{` to the last candidate of a window of PROBE_BYTES decodes as a list of events: a `}, {` inside a
nested object or list leaves closing brackets unbalanced, so it cannot decode, and the next
candidate is tried. The same function gives a range's end and the next range's start, so the ranges
tile the event list. A cut that still lands inside a string (a name holding `}, {"`) makes the range
before it fail to decode, and the reader then reads the whole file in one stream instead.
"""

from pathlib import Path
from typing import BinaryIO

import msgspec

from tools.trace.read.stream import _BOUNDARY, _EVENTS, _KEY, _last_boundary

PROBE_BYTES = 1 << 20
MAX_CANDIDATES = 64


def byte_ranges(path: Path, parts: int) -> list[tuple[int, int | None]]:
    """Up to `parts` (start, end) ranges covering the trace's events; the first starts at 0 (the
    header), the last ends at None (the file's end). Fewer ranges when no cut is found in a part."""
    size = path.stat().st_size
    with path.open("rb") as raw:
        head = raw.read(PROBE_BYTES)
        key = _KEY.search(head)
        first = key.end() if key else 0
        cuts: list[int] = []
        for n in range(1, parts):
            cut = _cut_after(raw, max(first, size * n // parts, cuts[-1] + 1 if cuts else 0))
            if cut is None:
                break
            cuts.append(cut)
    starts = [0, *cuts]
    ends: list[int | None] = [*cuts, None]
    return list(zip(starts, ends, strict=True))


def _cut_after(raw: BinaryIO, offset: int) -> int | None:
    """The first event start at or after `offset` whose following events decode; None if none."""
    raw.seek(offset)
    window = raw.read(PROBE_BYTES)
    last = _last_boundary(window, len(window))
    if last is None:
        return None
    for tried, candidate in enumerate(_BOUNDARY.finditer(window)):
        begin = candidate.end() - 1
        if tried >= MAX_CANDIDATES or begin >= last.start():
            return None
        try:
            _EVENTS.decode(b"[" + window[begin : last.start() + 1] + b"]")
        except msgspec.DecodeError:
            continue
        return offset + begin
    return None
