"""tools.trace.ranks.parallel and tools.trace.read.split: a plain trace cut into byte ranges read by several
processes, and rank files read one per process, give exactly the summary of one stream."""

import gzip
import json
import threading
from itertools import pairwise
from pathlib import Path

import pytest

import tools.trace.ranks.parallel as parallel
import tools.trace.read.stream as stream
from tools.errors import TraceError
from tools.trace import read_chrome_trace, read_profiles
from tools.trace.read.split import byte_ranges

from .glm5_shaped import glm5_events
from .test_trace import TRACES

CUDA = TRACES / "full_pool_cast_cuda.json.gz"


@pytest.fixture(scope="module")
def plain_cuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded H200 trace (nested args, braces inside strings) decompressed to plain JSON."""
    path = tmp_path_factory.mktemp("plain") / "cuda.json"
    path.write_bytes(gzip.decompress(CUDA.read_bytes()))
    return path


@pytest.fixture
def split_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Split and parallelize even small files."""
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)


def test_ranges_tile_the_events_at_event_starts(plain_cuda: Path) -> None:
    data = plain_cuda.read_bytes()
    for parts in (2, 3, 7, 40):
        ranges = byte_ranges(plain_cuda, parts)
        assert len(ranges) > 1
        assert ranges[0][0] == 0 and ranges[-1][1] is None
        for (_, end), (start, _) in pairwise(ranges):
            assert end == start and data[start : start + 1] == b"{"
            event, _ = json.JSONDecoder().raw_decode(data[start : start + (1 << 16)].decode(errors="replace"))
            assert "ph" in event  # a whole event starts there


@pytest.mark.parametrize("jobs", [2, 3, 7])
def test_split_reading_equals_one_stream(plain_cuda: Path, split_all: None, jobs: int) -> None:
    expected = read_chrome_trace(plain_cuda, jobs=1)
    assert read_chrome_trace(plain_cuda, jobs=jobs) == expected
    assert read_chrome_trace(CUDA, jobs=jobs) == expected.model_copy(
        update={"source": str(CUDA)}
    )  # gzip: one stream


def test_split_reading_with_tiny_chunks(
    plain_cuda: Path, split_all: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = read_chrome_trace(plain_cuda, jobs=1)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 997)  # inherited by the forked workers
    assert read_chrome_trace(plain_cuda, jobs=3) == expected


def test_a_cut_inside_an_event_falls_back_to_one_stream(
    plain_cuda: Path, split_all: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = read_chrome_trace(plain_cuda, jobs=1)
    size = plain_cuda.stat().st_size
    monkeypatch.setattr(parallel, "byte_ranges", lambda path, parts: [(0, size // 2), (size // 2, None)])
    assert read_chrome_trace(plain_cuda, jobs=2) == expected


def write_rank(folder: Path, name: str, cast: bool, graph: bool) -> Path:
    path = folder / name
    text = json.dumps({"traceEvents": glm5_events(cast, graph)}, indent=1)
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_ranks_in_parallel_equal_ranks_one_by_one(tmp_path: Path, split_all: None) -> None:
    """Rank files (plain and gzip, eager and CUDA graph) merged: the same as read one after another,
    while another thread runs (so the workers come from a fork server, not a fork)."""
    ranks = [
        write_rank(tmp_path, "rank0.json", True, False),
        write_rank(tmp_path, "rank1.json.gz", True, False),
        write_rank(tmp_path, "rank2.json", False, True),
    ]
    expected = read_profiles(ranks, jobs=1)
    assert len(expected.ranks) == 3
    assert read_profiles(ranks, jobs=2) == expected
    assert (
        read_profiles([tmp_path], jobs=3)
        == expected.model_copy(update={"source": ", ".join(str(p) for p in sorted(ranks))})
        or sorted(ranks) != ranks
    )
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait)
    busy.start()
    try:
        assert read_profiles(ranks, jobs=2) == expected
    finally:
        stop.set()
        busy.join()


def test_a_bad_rank_is_named_in_one_line(tmp_path: Path, split_all: None) -> None:
    good = write_rank(tmp_path, "rank0.json", True, False)
    bad = tmp_path / "rank1.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a"}, {"ph": ')
    with pytest.raises(TraceError, match=r"rank1\.json: invalid JSON at byte offset") as err:
        read_profiles([good, bad], jobs=2)
    assert "\n" not in str(err.value)


def test_workers_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFLOOP_TRACE_WORKERS", "3")
    assert parallel.workers() == 3
    monkeypatch.setenv("PERFLOOP_TRACE_WORKERS", "many")
    with pytest.raises(TraceError, match="PERFLOOP_TRACE_WORKERS must be a whole number >= 1, not 'many'"):
        parallel.workers()


def test_columns_handed_back_through_a_memfd_equal_pickled_ones(
    plain_cuda: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forked workers write their column arrays into a memfd each (`handoff`); what this
    process reads back equals what a pickle carries, range by range, every column and name. The
    workers are forked as `perfloop analyze` forks them (pytest-xdist's threads would otherwise
    have them started from a fork server, which pickles)."""
    import multiprocessing

    from tools.trace.ranks import handoff

    ranges = byte_ranges(plain_cuda, 3)
    monkeypatch.setattr(parallel, "_context", lambda: multiprocessing.get_context("fork"))
    shared = parallel._collect_ranges(plain_cuda, ranges)
    assert handoff.can_share(True)
    monkeypatch.setattr(handoff, "can_share", lambda forked: False)
    pickled = parallel._collect_ranges(plain_cuda, ranges)
    assert len(shared) == len(pickled) == 3
    for a, b in zip(shared, pickled, strict=True):
        assert [bytes(x) for x in handoff.columns(a)] == [bytes(x) for x in handoff.columns(b)]
        assert sum(len(x) for x in handoff.columns(a)) > 0
        assert (a.key_list, a.kernel_names, a.graph_corrs, a.events) == (
            b.key_list,
            b.kernel_names,
            b.graph_corrs,
            b.events,
        )


def test_put_then_take_restores_every_column() -> None:
    import os

    from tools.trace.ranks import handoff
    from tools.trace.read.collect import Collected

    from .test_trace_walk import random_events

    col = Collected()
    col.add(random_events(5))
    before = [bytes(x) for x in handoff.columns(col)]
    fd = handoff.new_file()
    try:
        sizes = handoff.put(col, fd)
        assert all(len(x) == 0 for x in handoff.columns(col)) and sum(sizes) == sum(map(len, before))
        assert [bytes(x) for x in handoff.columns(handoff.take(col, sizes, fd))] == before
    finally:
        os.close(fd)
