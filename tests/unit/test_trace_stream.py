"""tools.trace.read.stream: chunked decoding of real traces, bounded memory, one-line errors with offsets."""

import gzip
import json
from pathlib import Path

import pytest

import tools.trace.read.stream as stream
from tools.errors import TraceError
from tools.trace import read_chrome_trace, read_profiles
from tools.trace.read.stream import TraceStream

from .test_trace import TRACES, full_pool_cast, record_trace

CUDA = TRACES / "full_pool_cast_cuda.json.gz"


def events_of(path: Path) -> list:
    """Every event the stream yields, in order."""
    return [e for batch in TraceStream(path).batches() for e in batch]


@pytest.mark.parametrize("chunk", [97, 1000, 4096])
def test_tiny_chunks_give_the_same_events_and_summary(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Cuts land everywhere (inside strings with braces, nested args): nothing is lost or split."""
    whole = json.loads(gzip.decompress(CUDA.read_bytes()))["traceEvents"]
    expected = read_chrome_trace(CUDA)
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    got = events_of(CUDA)
    assert len(got) == len(whole)
    assert [e.name for e in got] == [e.get("name", "") for e in whole]
    assert read_chrome_trace(CUDA) == expected


def test_device_names_from_header(tmp_path: Path) -> None:
    s = TraceStream(CUDA)
    list(s.batches())
    assert s.device_names == ["NVIDIA H200"]
    assert read_chrome_trace(CUDA).device_name == "NVIDIA H200"


def test_braces_and_separators_inside_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = ['k}, {"x": 1', "lambda()#3}::operator()", '}, {\\"ph\\": \\"X\\"']
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": n,
            "pid": 1,
            "tid": 1,
            "ts": i,
            "dur": 1.0,
            "args": {"Input Dims": [[2, 3]], "Input type": ["float"]},
        }
        for i, n in enumerate(names)
    ]
    path = tmp_path / "t.json"
    path.write_text(
        '{"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events) + '\n], "x": [{"a": 1}, {"b": 2}]}'
    )
    monkeypatch.setattr(stream, "CHUNK_BYTES", 16)
    assert [e.name for e in events_of(path)] == [json.loads(json.dumps(n)) for n in names]


def test_truncated_plain_trace_names_byte_offset(tmp_path: Path) -> None:
    raw = gzip.decompress(CUDA.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceError, match=r"cut.json: invalid JSON at byte offset \d+") as err:
        read_chrome_trace(cut)
    offset = int(str(err.value).split("byte offset ")[1].split()[0])
    assert len(raw) // 3 < offset <= len(raw) // 2 and "\n" not in str(err.value)


def test_corrupt_middle_names_offset(tmp_path: Path) -> None:
    raw = bytearray(gzip.decompress(CUDA.read_bytes()))
    at = raw.index(b'"ph"', len(raw) // 2)
    raw[at : at + 4] = b"#ph#"
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(raw))
    with pytest.raises(TraceError, match="invalid JSON at byte offset"):
        read_chrome_trace(bad)


def test_no_trace_events_key(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"schemaVersion": 1, "events": []}')
    with pytest.raises(TraceError, match="expected a JSON object with a 'traceEvents' list"):
        read_chrome_trace(path)


def test_directory_of_rank_traces_is_merged(tmp_path: Path) -> None:
    """SGLang writes one trace per TP rank into one directory: read them together."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for rank in range(2):
        record_trace(ranks / f"p-TP-{rank}.trace.json.gz", full_pool_cast)
    (ranks / "notes.md").write_text("not a trace")
    merged = read_profiles([ranks])
    single = read_chrome_trace(ranks / "p-TP-0.trace.json.gz")
    assert [r.source for r in merged.ranks] == [str(p) for p in sorted(ranks.glob("*.json.gz"))]
    copy = next(op for op in merged.ops if op.name == "aten::copy_")
    assert copy.calls == 2 * next(op for op in single.ops if op.name == "aten::copy_").calls
    assert merged.steps == single.steps and sum(op.share for op in merged.ops) == pytest.approx(1.0)
    with pytest.raises(TraceError, match="holds no .json"):
        read_profiles([tmp_path])
