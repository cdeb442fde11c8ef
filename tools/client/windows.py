"""`[workload]` windows: requests kept in flight at the workload's concurrency (or arriving at its
rate), one window per repeat and level, on one server or alternating between two arms. With several
levels (`concurrency = [8, 1]`) the windows of repeat k are numbered k x levels + j, level j's
window of that round; each `Window` records its level."""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from state.door.calls import MeasureArgs, PairResult
from state.measurement.measure import Measurement, RequestRecord, Window
from state.measurement.workload import WorkloadConfig
from tools.client.stats import machine_probe_ms, pair_order, summarize
from tools.client.stream import chat_body, stream_completion, to_record
from tools.progress import report


def workload_prompts(w: WorkloadConfig) -> list[tuple[str, int]]:
    """The workload's (prompt, max_tokens), drawn from its seed: `input_len` words of random
    lowercase letters, `output_len` tokens (pure)."""
    rng = random.Random(w.seed)
    out = []
    for _ in range(w.prompts):
        words = rng.randint(*w.input_len)
        text = " ".join(
            "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 8))) for _ in range(words)
        )
        out.append((text, rng.randint(*w.output_len)))
    return out


def arrivals(w: WorkloadConfig, index: int) -> Iterator[float]:
    """Seconds from a window's start at which its requests arrive under `request_rate`: Poisson
    (exponential gaps) drawn from the workload's seed and the window's number (pure)."""
    assert w.request_rate is not None
    rng, t = random.Random(f"{w.seed}/{index}"), 0.0
    while True:
        t += rng.expovariate(w.request_rate)
        yield t


def run_window(args: MeasureArgs, w: WorkloadConfig, index: int) -> tuple[list[RequestRecord], Window]:
    """One window at the workload's (primary) level: `concurrency` requests in flight (each worker starts the next request as its
    last one ends; under `request_rate` not before the request's arrival) until `requests` were
    sent or `duration_s` passed (and every prompt was sent)."""
    items = workload_prompts(w)
    counter, lock = itertools.count(), threading.Lock()
    due = arrivals(w, index) if w.request_rate is not None else itertools.repeat(0.0)
    t0 = time.perf_counter()
    deadline = t0 + w.duration_s if w.duration_s is not None else math.inf

    def worker() -> list[RequestRecord]:
        done: list[RequestRecord] = []
        while True:
            with lock:
                i, at = next(counter), t0 + next(due)
            if w.requests is not None and i >= w.requests:
                return done
            if i >= len(items) and at >= deadline:
                return done  # it would arrive after the window
            time.sleep(max(0.0, at - time.perf_counter()))
            # The instant checked against the deadline is the start recorded: a thread starved of
            # the CPU between the two once started a request 1.5 s into a 1.5 s window (load 4).
            now = time.perf_counter()
            if i >= len(items) and now >= deadline:
                return done
            prompt, max_tokens = items[i % len(items)]
            start = now - t0
            times, text, usage = stream_completion(
                args.base_url, chat_body(args.model, prompt, max_tokens), args.config.request_timeout_s
            )
            rec = to_record(i % len(items), times, text, usage)
            done.append(rec.model_copy(update={"window": index, "start_ms": start * 1000}))

    with ThreadPoolExecutor(w.primary) as pool:
        futures = [pool.submit(worker) for _ in range(w.primary)]
        records = sorted((r for f in futures for r in f.result()), key=lambda r: r.start_ms or 0.0)
    wall = time.perf_counter() - t0
    tokens = sum(r.completion_tokens for r in records)
    return records, Window(
        index=index, concurrency=w.primary, requests=len(records), output_tokens=tokens, wall_s=wall
    )


def measure_windows(args: MeasureArgs, w: WorkloadConfig) -> Measurement:
    """`warmup_windows` discarded at each level, then `repeats` rounds of one window per level on
    one server."""
    levels = w.levels
    for c in levels:
        for k in range(w.warmup_windows):
            report(f"measuring {args.label}: warm-up window {k + 1}/{w.warmup_windows} at concurrency {c}")
            run_window(args, w.at(c), -1)
    records: list[RequestRecord] = []
    windows: list[Window] = []
    probes: list[float] = []  # after each window: the arm's machine state, not two instants of it
    for k in range(args.config.repeats):
        for j, c in enumerate(levels):
            report(f"measuring {args.label}: window {k + 1}/{args.config.repeats} at concurrency {c}")
            recs, window = run_window(args, w.at(c), k * len(levels) + j)
            records += recs
            windows.append(window)
            probes.append(machine_probe_ms())
    wall = sum(x.wall_s for x in windows)
    m = summarize(args.label, args.tree_sha256, records, w.prompts, wall, windows)
    return m.model_copy(update={"probe_ms": probes})


def measure_pair_windows(arms: tuple[MeasureArgs, MeasureArgs], w: WorkloadConfig) -> PairResult:
    """`[workload]` arms interleaved by window: each arm's warm-up windows (at each level), then
    `repeats` rounds of one window per level on each server, which goes first alternating (ABBA)."""
    levels = w.levels
    for a in arms:
        for c in levels:
            for _ in range(w.warmup_windows):
                run_window(a, w.at(c), -1)
    before = machine_probe_ms()
    records: tuple[list[RequestRecord], list[RequestRecord]] = ([], [])
    windows: tuple[list[Window], list[Window]] = ([], [])
    reps = arms[0].config.repeats
    for k in range(reps):
        for j, c in enumerate(levels):
            report(f"measuring both arms, interleaved: window pair {k + 1}/{reps} at concurrency {c}")
            for which in pair_order(k, j):
                recs, window = run_window(arms[which], w.at(c), k * len(levels) + j)
                records[which].extend(recs)
                windows[which].append(window)
    probes = [before, machine_probe_ms()]
    ref, cand = (
        summarize(a.label, a.tree_sha256, recs, w.prompts, sum(x.wall_s for x in ws), ws).model_copy(
            update={"probe_ms": probes}
        )
        for a, recs, ws in zip(arms, records, windows, strict=True)
    )
    return PairResult(reference=ref, candidate=cand)
