"""Stream the events of a torch.profiler Chrome trace (`.json` or `.json.gz`) in bounded memory.

The file is read in chunks of CHUNK_BYTES. Each chunk is cut after the last event boundary
(`}` `,` `{` outside any string, at the depth of the `traceEvents` list) and the complete events
before it are decoded at once by msgspec into `Event` structs that keep only the fields the
analysis reads. A candidate cut is accepted only if the events before it decode as a JSON list, so
a `}, {` inside a string or a nested object can never split an event: the next candidate back is
tried instead. Each chunk is read into one reused buffer and decoded where it lies (the `[` and `]`
that make the events a list are written over the separators around them): three copies of every
byte fewer than slicing and joining `bytes`, 7% of reading a trace. Memory stays at about one chunk
plus one batch of events, whatever the file size.
"""

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import BufferedIOBase
from pathlib import Path
from typing import Any

import msgspec

from tools.errors import TraceError

CHUNK_BYTES = 256 << 10
"""Small enough that a batch of decoded events stays in the CPU's caches and the allocator reuses its
memory: a fifth less CPU than 8 MiB chunks (benchmarks/trace_analysis_vs_hta.py)."""
HEADER_LIMIT_BYTES = 64 << 20
MAX_CUT_TRIES = 8
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_BYTE = re.compile(r"\(byte (\d+)\)")
_NO_RAW = msgspec.Raw(b"")
"""The default of an absent raw field, shared (Raw is immutable): a factory call per kernel and
launch event, which carry no dims, was 4% of decoding."""


class Args(msgspec.Struct, gc=False):
    """The `args` fields the analysis reads; every other key is skipped while decoding.

    Input dims and types stay raw JSON: operators repeat a few shapes millions of times, so they
    are interned by their bytes and parsed once per distinct value."""

    correlation: int | None = None
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    device: int | None = None


class Event(msgspec.Struct, gc=False):
    """One trace event, reduced to the fields the analysis reads."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: Args | None = None


class _Device(msgspec.Struct):
    """One entry of the trace's deviceProperties."""

    name: str = ""


class Header(msgspec.Struct):
    """Top-level trace fields other than the events."""

    deviceProperties: list[_Device] = []


class _Tail(msgspec.Struct):
    """The last events and whatever top-level fields follow the list."""

    traceEvents: list[Event]
    deviceProperties: list[_Device] = []


_EVENTS = msgspec.json.Decoder(list[Event])
_HEADER = msgspec.json.Decoder(Header)
_TAIL = msgspec.json.Decoder(_Tail)


@dataclass
class TraceStream:
    """The events of one trace, batch by batch; `device_names` is complete once iterated.

    `start` and `end` (plain files only) read one byte range: `start` 0 or the first byte of an
    event, `end` None (to the end of the file) or the first byte of the event after the range
    (`tools.trace.read.split` finds them)."""

    path: Path
    device_names: list[str] = field(default_factory=list)
    bytes_read: int = 0
    start: int = 0
    end: int | None = None

    def batches(self) -> Iterator[list[Event]]:
        """Decoded events, one list per chunk; TraceError (file, byte offset, expectation) on bad input.

        A batch's raw fields (dims, types) are views into the stream's buffer: read them before
        asking for the next batch."""
        with _open(self.path) as raw:
            if self.start:
                raw.seek(self.start)
                self.bytes_read = self.start
                window = _Window(b"")
            else:
                head, start = self._find_events(raw)
                window = _Window(head[start:])
            while self._fill(raw, window):
                events = _decode_prefix(window)
                if events:
                    yield events
                elif window.end - window.begin > HEADER_LIMIT_BYTES:
                    raise TraceError(
                        f"{self.path}: no event boundary in {window.end - window.begin} bytes after "
                        f"byte offset {self.bytes_read - (window.end - window.begin)}; expected trace "
                        "events separated by '}}, {{'"
                    )
            rest = bytes(window.data[window.begin : window.end])
            if self.end is not None:  # a range before the file's last: complete events and a comma
                rest = rest.rstrip().rstrip(b",") + b"]}"
            yield self._tail(rest, self.bytes_read - (window.end - window.begin))

    def _fill(self, raw: BufferedIOBase, window: "_Window") -> int:
        """Append the next chunk of (decompressed) bytes to the window; the bytes read (0 at the end)."""
        size = self._size()
        got = self._io(raw.readinto, window.room(size)) if size > 0 else 0
        window.end += got
        return got

    def _read(self, raw: BufferedIOBase) -> bytes:
        """The next chunk of (decompressed) bytes, for the header."""
        return self._io(raw.read, self._size())

    def _size(self) -> int:
        """Bytes to read next: a chunk, or less where the range ends."""
        return CHUNK_BYTES if self.end is None else min(CHUNK_BYTES, self.end - self.bytes_read)

    def _io(self, call: Callable[[Any], Any], arg: Any) -> Any:
        """`call(arg)` (a read), counting the bytes; TraceError on a truncated or corrupt gzip stream."""
        try:
            got = call(arg)
        except (EOFError, OSError, zlib.error) as err:
            raise TraceError(
                f"{self.path}: gzip data is truncated or corrupt after {self.bytes_read} "
                f"uncompressed bytes ({err}); re-export the trace"
            ) from err
        self.bytes_read += got if isinstance(got, int) else len(got)
        return got

    def _find_events(self, raw: BufferedIOBase) -> tuple[bytes, int]:
        """Read up to the opening `[` of traceEvents; decode the header before it."""
        buf = b""
        while (match := _KEY.search(buf)) is None:
            chunk = self._read(raw)
            if not chunk or len(buf) > HEADER_LIMIT_BYTES:
                empty = not buf.strip()
                raise TraceError(
                    f"{self.path}: "
                    + (
                        "file is empty; expected a torch.profiler Chrome trace (JSON)"
                        if empty
                        else "expected a JSON object with a "
                        "'traceEvents' list (torch.profiler export_chrome_trace output)"
                    )
                )
            buf += chunk
        head = buf[: match.start()].rstrip().rstrip(b",") + b"}"
        try:
            self.device_names += [d.name for d in _HEADER.decode(head).deviceProperties]
        except msgspec.DecodeError as err:
            raise TraceError(
                f"{self.path}: expected a JSON object with a 'traceEvents' list before "
                f"byte offset {match.start()} ({err})"
            ) from err
        return buf, match.end()

    def _tail(self, rest: bytes, offset: int) -> list[Event]:
        """The events after the last cut, and the end of the document."""
        prefix = b'{"traceEvents":['
        try:
            tail = _TAIL.decode(prefix + rest)
        except msgspec.DecodeError as err:
            at = _BYTE.search(str(err))
            where = offset + int(at.group(1)) - len(prefix) if at else offset + len(rest)
            raise TraceError(
                f"{self.path}: invalid JSON at byte offset {where} ({_reason(err)}); "
                "the trace is truncated or not a Chrome trace"
            ) from err
        self.device_names += [d.name for d in tail.deviceProperties]
        return tail.traceEvents


def _reason(err: msgspec.DecodeError) -> str:
    """msgspec's message without its own byte position."""
    return _BYTE.sub("", str(err)).strip().rstrip(".").lower() or "malformed"


class _Window:
    """The bytes not yet decoded, `data[begin:end]`, in one buffer reused chunk after chunk (each
    chunk read into it, no copies): the byte before `begin` is free for the `[` that makes the
    events a JSON list, and the `,` after the last complete event is overwritten with its `]`."""

    def __init__(self, pending: bytes) -> None:
        self.data = bytearray(1 + len(pending) + CHUNK_BYTES)
        self.data[1 : 1 + len(pending)] = pending
        self.begin, self.end = 1, 1 + len(pending)

    def room(self, size: int) -> memoryview:
        """Space for `size` more bytes after the pending ones, moved to the front first (a new
        buffer when they do not fit: the last batch's raw fields may still point into this one)."""
        pending = self.data[self.begin : self.end]
        if 1 + len(pending) + size > len(self.data):
            self.data = bytearray(1 + 2 * (len(pending) + size))
        self.data[1 : 1 + len(pending)] = pending
        self.begin, self.end = 1, 1 + len(pending)
        return memoryview(self.data)[self.end : self.end + size]


def _decode_prefix(window: _Window) -> list[Event]:
    """Decode the complete events at the front of the window and move its start past them.

    Tries the last MAX_CUT_TRIES boundaries, latest first; [] when none gives a valid list."""
    data, end = window.data, window.end
    data[window.begin - 1] = 0x5B  # [
    for _ in range(MAX_CUT_TRIES):
        boundary = _last_boundary(data, end, window.begin)
        if boundary is None:
            return []
        close = boundary.start()
        comma, data[close + 1] = data[close + 1], 0x5D  # ]
        try:
            events = _EVENTS.decode(memoryview(data)[window.begin - 1 : close + 2])
        except msgspec.DecodeError:
            data[close + 1] = comma
            end = close
            continue
        window.begin = boundary.end() - 1
        return events
    return []


def _last_boundary(buf: bytes | bytearray, end: int, begin: int = 0) -> re.Match[bytes] | None:
    """The last `}, {` between two events whose `}` lies in buf[begin:end], or None."""
    close = buf.rfind(b"}", begin, end)
    while close >= 0:
        if boundary := _BOUNDARY.match(buf, close):
            return boundary
        close = buf.rfind(b"}", begin, close)
    return None


def _open(path: Path) -> BufferedIOBase:
    """The file's bytes, decompressed on the fly when it starts with the gzip magic."""
    try:
        with path.open("rb") as raw:
            magic = raw.read(2)
        return gzip.open(path, "rb") if magic == b"\x1f\x8b" else path.open("rb")
    except OSError as err:
        raise TraceError(f"{path}: cannot read the trace ({err.strerror}); check the path") from err
