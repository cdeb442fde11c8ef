"""`profiling.whole_trace`: a trace the server could not write whole (a full disk, a file size
limit) is refused by name, never taken as a profile; a whole one passes."""

import gzip
from pathlib import Path

import pytest

from tools.errors import TraceError
from tools.profiling import whole_trace

TRACE = Path(__file__).resolve().parents[1] / "data/traces/full_pool_cast_cuda.json.gz"


def test_a_whole_trace_passes_gzipd_or_not(tmp_path: Path) -> None:
    assert whole_trace(TRACE) == TRACE
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(TRACE.read_bytes()) + b"\n")
    assert whole_trace(plain) == plain


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("empty.json.gz", gzip.compress(b"", mtime=0), "the trace is empty: the server could not write it"),
        ("blank.json", b"\n  \n", "the trace is empty"),
        (
            "cut.json.gz",
            gzip.compress(gzip.decompress(TRACE.read_bytes())[:5000], mtime=0),
            "cut off after 5000 bytes",
        ),
        ("short.json.gz", TRACE.read_bytes()[:3000], "the trace's data ends early or is corrupt"),
    ],
    ids=["empty", "blank", "cut", "short"],  # the same on every xdist worker (bytes ids are not)
)
def test_a_trace_not_written_whole_is_refused_by_name(
    tmp_path: Path, name: str, content: bytes, says: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceError) as err:
        whole_trace(path)
    assert str(err.value).startswith(f"{path}: ") and says in str(err.value)
    assert str(err.value).endswith("free space or raise the limit, and run again")
    assert len(str(err.value).splitlines()) == 1
