"""Timings turned into statistics (pure), and the machine probe and arm order they are read with."""

from __future__ import annotations

import statistics
import time

from state.measurement.measure import Measurement, RequestRecord, Stat, Window


def machine_probe_ms(repeats: int = 3) -> float:
    """Best of `repeats` timings of a fixed pure-Python loop, in ms: how fast this host runs a
    CPU-bound job right now (a loaded or throttled machine takes longer)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        acc = 0
        for i in range(200_000):
            acc = (acc + i * i) % 1_000_003
        best = min(best, (time.perf_counter() - t0) * 1000)
    return best


def stat(values: list[float]) -> Stat:
    """Median, quartiles and range of samples (pure)."""
    if len(values) == 1:
        v = values[0]
        return Stat(median=v, p25=v, p75=v, min=v, max=v, n=1)
    q = statistics.quantiles(values, n=4, method="inclusive")
    return Stat(
        median=statistics.median(values), p25=q[0], p75=q[2], min=min(values), max=max(values), n=len(values)
    )


def timed(records: list[RequestRecord]) -> list[RequestRecord]:
    """The requests whose stream timed their tokens: at least one delta after the first and about
    one token a delta (at least half of the tokens after the first in deltas of their own). A
    server that merges a queued request's deltas (vLLM, under load) sends its whole output at once:
    its gaps (0.0 ms, or microseconds inside a burst) are the API server's, not the model's, and a
    TPOT made of them is no decode time at all (pure)."""
    return [r for r in records if r.timed]


def tpot_samples(records: list[RequestRecord]) -> list[float]:
    """Per-request TPOT of the timed requests (`timed`); all of them where none was timed."""
    return [r.tpot_ms for r in timed(records) or records]


def summarize(
    label: str,
    tree_sha256: str,
    records: list[RequestRecord],
    n_prompts: int,
    wall_s: float,
    windows: list[Window] | None = None,
) -> Measurement:
    """Statistics and the output-equality data of one workload run (pure)."""
    by_prompt: dict[int, list[str]] = {}
    for r in records:
        by_prompt.setdefault(r.prompt_index, []).append(r.text)
    return Measurement(
        label=label,
        tree_sha256=tree_sha256,
        tpot_ms=stat(tpot_samples(records)),
        ttft_ms=stat([r.ttft_ms for r in records]),
        output_tok_per_s=sum(r.completion_tokens for r in records) / wall_s,
        outputs=[by_prompt[i][0] for i in range(n_prompts)],
        outputs_stable=all(len(set(texts)) == 1 for texts in by_prompt.values()),
        requests=records,
        windows=windows or [],
    )


def pair_order(repeat: int, prompt_index: int) -> tuple[int, int]:
    """Which arm goes first for this request pair: ABBA over repeats and prompts, so neither arm
    is always the one that runs right after the other (pure). 0 = reference, 1 = candidate."""
    return (0, 1) if (repeat + prompt_index) % 2 == 0 else (1, 0)
