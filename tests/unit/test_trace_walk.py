"""The vectorized walk (tools.trace.analyses.walk) equals the event-by-event stack walk it replaced
(tests/unit/trace_reference.py) on random traces built to hit its corners: overlapping and
improperly nested events, equal starts, zero durations, several threads, repeated and missing
correlation ids, CUDA-graph launches, syncs inside sync ops, Python frames, step markers."""

import random
import threading

import msgspec
import numpy as np
import pytest

from tools.trace.analyses.device import work_by_correlation
from tools.trace.analyses.host import SYNC_OPS
from tools.trace.analyses.tree import walk_order
from tools.trace.analyses.walk import GRAPH_ROW, _by_clock, walk
from tools.trace.read.collect import Collected
from tools.trace.read.stream import Args, Event

from .trace_reference import walk as reference_walk

NAMES = [
    "aten::mm",
    "aten::copy_",
    "aten::_local_scalar_dense",
    "forward_decode",
    "inner.forward_decode",
    "ProfilerStep#1",
    "ProfilerStep#2",
    "model.py(12): forward",
    "torch/nn/modules/module.py(1500): _call_impl",
    "serve.py(40): step",
]
CATS = ["cpu_op", "cpu_op", "user_annotation", "python_function"]
API = ["cudaLaunchKernel", "cudaLaunchKernel", "cudaGraphLaunch", "cudaStreamSynchronize", "cudaMemcpy"]


def random_events(seed: int) -> list[Event]:
    """Nested host events on 1-3 threads, launches and syncs inside them, kernels for most launches."""
    rng = random.Random(seed)
    events: list[Event] = []
    corrs: list[int] = []

    def tick(x: float) -> float:
        return round(x * 2) / 2  # half-microsecond grid: many equal starts and ends

    def frames(tid: int, start: float, end: float, depth: int) -> None:
        t = start
        while t < end and rng.random() < 0.85:
            t = tick(t + rng.choice([0.0, 0.5, rng.uniform(0, 3)]))
            if rng.random() < 0.3:  # an API call: launch, graph launch or sync
                corr = rng.choice([rng.randrange(40), -1]) if rng.random() < 0.9 else None
                corrs.append(corr if corr is not None else -1)
                args: Args | None = Args(correlation=corr)
                events.append(
                    Event("X", "cuda_runtime", rng.choice(API), 1, tid, t, tick(rng.uniform(0, 2)), args)
                )
                continue
            length = tick(rng.choice([0.0, rng.uniform(0, end - t + 2)]))  # may overrun its parent
            cat = rng.choice(CATS)
            dims = msgspec.Raw(rng.choice([b"[[1, 2], [2, 3]]", b"[[4]]", b"[[1, 2], []]"]))
            args = Args(input_dims=dims) if cat == "cpu_op" and rng.random() < 0.8 else None
            events.append(Event("X", cat, rng.choice(NAMES), 1, tid, t, length, args))
            if depth < 5:
                frames(tid, t, t + length, depth + 1)
            t += length * rng.choice([0.0, 0.5, 1.0])

    for tid in range(rng.randint(1, 3)):
        frames(tid, 0.0, 200.0, 0)
    for corr in set(corrs) | {99, 98}:  # 99 and 98: kernels no launch claims
        for _ in range(rng.randint(0 if corr >= 0 else 1, 3)):
            kernel = rng.choice(["gemm", "copy", "softmax"])
            args = Args(correlation=corr, device=rng.randint(0, 1))
            events.append(
                Event("X", "kernel", kernel, 0, 7, tick(rng.uniform(0, 300)), rng.uniform(0.5, 9), args)
            )
    rng.shuffle(events)
    return events


def both(events: list[Event]) -> tuple:
    """(reference, vectorized) walks of the same collected events, and the work each left."""
    col = Collected()
    col.add(events)
    corrs, work, _ = work_by_correlation(col.kernels)
    old_work = dict(zip(corrs.tolist(), work.tolist(), strict=True))
    old = reference_walk(col, old_work)
    new, taken = walk(col, corrs, work)
    return old, old_work, new, dict(zip(corrs[~taken].tolist(), work[~taken].tolist(), strict=True)), col


@pytest.mark.parametrize("seed", range(60))
def test_vectorized_walk_equals_the_stack_walk(seed: int) -> None:
    old, old_left, new, new_left, _ = both(random_events(seed))
    assert list(new.groups.items()) == list(old.groups.items())  # same floats, same order
    assert list(new.syncs.items()) == list(old.syncs.items())
    assert new.steps == old.steps
    assert new.decode_calls == old.decode_calls
    assert new_left == old_left


def test_random_traces_reach_the_corners() -> None:
    """The generator really makes what the equality above is meant to cover."""
    seen = {"graph row": 0, "sync op": 0, "sync call": 0, "unclaimed": 0, "located": 0, "steps": 0}
    for seed in range(60):
        old, old_left, _, _, col = both(random_events(seed))
        seen["graph row"] += col.keys[(GRAPH_ROW, (), ())] in old.groups
        seen["sync op"] += any(name in SYNC_OPS for name, _ in old.syncs)
        seen["sync call"] += any(name.startswith("cuda") for name, _ in old.syncs)
        seen["unclaimed"] += bool(old_left)
        seen["located"] += any(g[3] for g in old.groups.values())
        seen["steps"] += len(old.steps) > 1
    assert all(seen.values()), seen


def test_cpu_only_trace_uses_self_cpu_time() -> None:
    events = [e for e in random_events(3) if e.cat != "kernel"]
    old, _, new, _, _ = both(events)
    assert not new.on_device
    assert list(new.groups.items()) == list(old.groups.items())
    assert np.isfinite([g[1] for g in new.groups.values()]).all()


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 1001])
def test_device_activity_medians_are_the_statistics_medians(n: int) -> None:
    """np.median replaced statistics.median on kernel durations and gaps (a sort of a Python list
    of every kernel was a tenth of a 1 GB trace's summary): the same floats, odd and even counts."""
    from statistics import median

    from tools.trace.analyses.device import GAP_MIN_US, Windows, _merge, device_activity

    rng = np.random.default_rng(n)
    start = np.sort(rng.uniform(0, 1e6, n))
    end = start + rng.uniform(0.1, 5.0, n) * rng.choice([1.0, 1e-3, 3.7], n)
    windows = Windows(
        device=np.zeros(1, dtype=np.int64),
        window=np.zeros(1, dtype=np.int64),
        offsets=np.array([0, n]),
        start=start,
        end=end,
    )
    got = device_activity(windows, 0.0)
    order = np.lexsort((end, start))
    assert got.median_kernel_us == median((end[order] - start[order]).tolist())
    _, gaps = _merge(start[order], end[order])
    gaps = gaps[gaps >= GAP_MIN_US]
    assert got.gaps == len(gaps)
    assert got.median_gap_us == (median(gaps.tolist()) if len(gaps) else 0.0)


@pytest.mark.parametrize("seed", range(5))
def test_walk_order_is_the_lexsort_by_thread_start_longer_first(seed: int) -> None:
    """The timsort-based order equals the lexsort it replaced, ties of start within and across
    threads included (starts and durations drawn from a few values)."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        sizes = rng.integers(0, 40, size=int(rng.integers(1, 5))).tolist()
        start = rng.integers(0, 15, size=sum(sizes)).astype(float)
        dur = rng.integers(0, 4, size=sum(sizes)).astype(float)
        thread = np.repeat(np.arange(len(sizes)), sizes)
        assert (walk_order(start, dur, sizes) == np.lexsort((-dur, start, thread))).all()


def test_by_clock_is_the_lexsort_by_clock_then_sub() -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 50, 500):
        clock, sub = rng.integers(0, 30, size=n), rng.integers(-6, 2, size=n)
        assert (_by_clock(clock, sub) == np.lexsort((sub, clock))).all()


@pytest.mark.parametrize("seed", range(12))
def test_walk_with_the_jumping_on_two_threads_equals_the_stack_walk(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every trace above takes the two-thread path here (a real trace's million events do)."""
    import tools.trace.analyses.tree as tree_module

    monkeypatch.setattr(tree_module, "SPLIT_EVENTS", 0)
    old, old_left, new, new_left, _ = both(random_events(seed))
    assert list(new.groups.items()) == list(old.groups.items())
    assert list(new.syncs.items()) == list(old.syncs.items())
    assert (new.steps, new.decode_calls, new_left) == (old.steps, old.decode_calls, old_left)


@pytest.mark.parametrize("cores", [{0}, {0, 1}])
def test_parents_on_two_threads_equal_one_thread(cores: set[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """200 k events nested up to 12 deep, a fifth of the frames outliving their parent (as a step
    marker overlapping the last operator of the step before does), on one core and on two."""
    import tools.trace.analyses.tree as tree_module

    rng = np.random.default_rng(len(cores))
    n = 200_000
    start = np.sort(rng.integers(0, n // 3, size=n)).astype(float)
    end = start + rng.choice([0.0, 0.5, 2.0, 40.0, 900.0], size=n, p=[0.2, 0.3, 0.3, 0.15, 0.05])
    frame = rng.random(n) < 0.75
    thread = np.repeat([0, 1, 2], [n // 2, n // 4, n - n // 2 - n // 4])
    monkeypatch.setattr(tree_module, "SPLIT_EVENTS", 10**9)
    one = tree_module.parents(start, end, frame, thread)
    monkeypatch.setattr(tree_module, "SPLIT_EVENTS", 0)
    monkeypatch.setattr(tree_module.os, "sched_getaffinity", lambda _: cores)
    for _ in range(3):  # the threads' interleaving differs run to run; the parents may not
        assert (tree_module.parents(start, end, frame, thread) == one).all()
    assert (one >= 0).mean() > 0.5 and tree_module.tree(one).depth.max() >= 5  # deep enough to jump


def test_an_error_in_the_second_thread_is_raised_in_the_first() -> None:
    from tools.trace.analyses.tree import beside

    def fails() -> int:
        raise ValueError("aside failed")

    with pytest.raises(ValueError, match="aside failed"):
        beside(fails, lambda: 1)
    assert beside(lambda: 2, lambda: 3) == (2, 3)


def test_one_thread_runs_both_calls_here_first() -> None:
    """A rank file's worker (one of several sharing the cores) walks on one thread: `here` first,
    which `parents` needs (the first half's parents before the second half jumps on them)."""
    from tools.trace.analyses.tree import beside, one_thread, threads_free

    seen: list[tuple[str, str]] = []

    def call(name: str, value: int) -> int:
        seen.append((name, threading.current_thread().name))
        return value

    with one_thread():
        assert not threads_free()
        out = beside(lambda: call("aside", 1), lambda: call("here", 2))
    assert out == (1, 2)
    assert seen == [("here", threading.current_thread().name), ("aside", threading.current_thread().name)]
