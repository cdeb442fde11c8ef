"""The benchmark client's door tools: measure one server, two arms interleaved, or greedy outputs.

Timing is taken per request (TTFT, inter-token latencies) as sglang's bench_serving does
(tools/client/stream.py), and turned into statistics by pure functions (tools/client/stats.py),
separate from the HTTP I/O; `[workload]` windows are in tools/client/windows.py.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from state.door.calls import MeasureArgs, MeasureResult, PairArgs, PairResult
from state.measurement.correctness import OutputsArgs, OutputsResult
from state.measurement.measure import Measurement, RequestRecord, Window
from state.measurement.workload import WorkloadConfig
from tools.client.stats import machine_probe_ms, pair_order, summarize
from tools.client.stream import chat_body, stream_completion, to_record
from tools.client.windows import measure_pair_windows, measure_windows
from tools.door import tool
from tools.engines.benchrun import BenchRun
from tools.engines.registry import engine
from tools.errors import ConfigError
from tools.progress import report


@tool("bench.measure")
def measure(args: MeasureArgs) -> MeasureResult:
    """Measure with the engine's benchmark (sglang.bench_serving, `vllm bench serve`) where asked
    and present, else with perfloop's client; with `both`, perfloop's client and then the
    benchmark (`Measurement.beside`)."""
    python = args.config.bench_serving.python.replace("{python}", args.python)
    client = engine(args.engine).bench()
    found = client.find(python) if client is not None and args.bench_serving != "never" else None
    if found is None and args.bench_serving in ("always", "both"):
        has = client.needs if client is not None else f"serving benchmark of {args.engine}"
        raise ConfigError(
            f'measure.bench_serving.use = "{args.bench_serving}" but {python} has no {has}; '
            f"install {args.engine} there, or set measure.bench_serving.python"
        )
    both = args.bench_serving == "both"
    before = machine_probe_ms()
    if found and not both:
        m = measure_with_bench_serving(args, python, *found)
    elif args.workload is not None:
        m = measure_windows(args, args.workload)
    else:
        m = measure_with_client(args)
    # the CPU probe before, between the requests or windows (perfloop's client), and after: the
    # median of many tells the machine's state during the arm, where two instants of a shared
    # machine could read a passing spike as a drift (decision/stats/rule.py widens the CI by it)
    update: dict = {"probe_ms": [before, *m.probe_ms, machine_probe_ms()]}
    if found and both:  # the same launch again, by the engine's benchmark: recorded beside, not judged
        update["beside"] = measure_with_bench_serving(args, python, *found)
    return MeasureResult(measurement=m.model_copy(update=update))


def measure_with_client(args: MeasureArgs) -> Measurement:
    """Warm up, then send every prompt `repeats` times, one request at a time."""
    cfg = args.config
    warm_up(args)
    records: list[RequestRecord] = []
    probes: list[float] = []
    probing = 0.0
    total = cfg.repeats * len(cfg.prompts)
    t0 = time.perf_counter()
    order = [i for _rep in range(cfg.repeats) for i in range(len(cfg.prompts))]
    while order:
        for i in order:
            report(f"measuring {args.label}: request {len(records) + 1}/{max(total, len(records) + 1)}")
            arrivals, text, usage = stream_completion(
                args.base_url, chat_body(args.model, cfg.prompts[i], cfg.max_tokens), cfg.request_timeout_s
            )
            records.append(to_record(i, arrivals, text, usage))
            t = time.perf_counter()
            probes.append(machine_probe_ms())  # between requests, off the clock of both
            probing += time.perf_counter() - t
        order = untimed_again(records, len(cfg.prompts), cfg.repeats)
    wall = time.perf_counter() - t0 - probing
    m = summarize(args.label, args.tree_sha256, records, len(cfg.prompts), wall)
    return m.model_copy(update={"probe_ms": probes})


def untimed_again(records: list[RequestRecord], prompts: int, repeats: int) -> list[int]:
    """The prompts to send once more: those with fewer than `repeats` streams that timed their
    tokens while another stream did (the server times streams; this client, starved of the CPU,
    read those at once: the plan sized its interval for `repeats` timings a prompt, and a prompt
    left with two of three cut a fresh-clone CI's 6.21x fix to [0.89, 41.79] on its few degrees of
    freedom), until each has sent `repeats` more than its first `repeats` (pure). A server that
    times no stream (it merges every one) gets no extra request."""
    sent = [0] * prompts
    timed = [0] * prompts
    for r in records:
        if 0 <= r.prompt_index < prompts:
            sent[r.prompt_index] += 1
            timed[r.prompt_index] += r.timed or r.completion_tokens < 2  # one token: nothing to time
    if not any(timed):
        return []
    return [i for i in range(prompts) if timed[i] < repeats and sent[i] < 2 * repeats]


def warm_up(args: MeasureArgs) -> None:
    """Send the config's warm-up requests (their timings are discarded)."""
    cfg = args.config
    for i in range(cfg.warmup_requests):
        stream_completion(
            args.base_url,
            chat_body(args.model, cfg.prompts[i % len(cfg.prompts)], cfg.max_tokens),
            cfg.request_timeout_s,
        )


@tool("bench.measure_pair")
def measure_pair(args: PairArgs) -> PairResult:
    """Both arms with one workload, one request at a time, alternating between the two servers:
    each prompt is sent to both back to back (the first of the two alternates), so both arms see
    the same machine state. Each server gets its warm-ups first. Always perfloop's client."""
    arms = (args.reference, args.candidate)
    cfg = args.reference.config
    if args.candidate.config != cfg or args.candidate.workload != args.reference.workload:
        raise ConfigError("measure_pair: the two arms must run the same workload")
    if args.reference.workload is not None:
        return measure_pair_windows(arms, args.reference.workload)
    for a in arms:
        warm_up(a)
    before = machine_probe_ms()
    records: tuple[list[RequestRecord], list[RequestRecord]] = ([], [])
    total = cfg.repeats * len(cfg.prompts)
    t0 = time.perf_counter()
    for rep in range(cfg.repeats):
        for i, prompt in enumerate(cfg.prompts):
            report(f"measuring both arms, interleaved: request pair {len(records[0]) + 1}/{total}")
            for which in pair_order(rep, i):
                a = arms[which]
                arrivals, text, usage = stream_completion(
                    a.base_url, chat_body(a.model, prompt, cfg.max_tokens), cfg.request_timeout_s
                )
                records[which].append(to_record(i, arrivals, text, usage))
    wall = (time.perf_counter() - t0) / 2
    probes = [before, machine_probe_ms()]
    ref, cand = (
        summarize(a.label, a.tree_sha256, recs, len(cfg.prompts), wall).model_copy(
            update={"probe_ms": probes}
        )
        for a, recs in zip(arms, records, strict=True)
    )
    return PairResult(reference=ref, candidate=cand)


def measure_with_bench_serving(args: MeasureArgs, python: str, module: str, version: str) -> Measurement:
    """`repeats` runs of bench_serving over `len(prompts)` seeded prompts, summarized like the
    client's; under `[workload]` each run is one window of `requests` prompts at a concurrency
    level (the warm-up windows' requests sent as bench_serving's warm-up), `repeats` at each level
    in turn, numbered as perfloop's client numbers them (repeat k of level j: k x levels + j)."""
    cfg, w = args.config, args.workload
    client = engine(args.engine).bench()
    assert client is not None  # found by it
    n = len(cfg.prompts) if w is None else client.window_requests(w)
    warmups = cfg.warmup_requests if w is None else w.warmup_windows * n
    levels: list[WorkloadConfig | None] = [None] if w is None else [w.at(c) for c in w.levels]
    records: list[RequestRecord] = []
    windows: list[Window] = []
    duration = 0.0
    for j, at in enumerate(levels):
        runs = client.run(
            BenchRun(
                python, module, cfg.bench_serving, args.base_url, args.model, n, cfg.max_tokens,
                cfg.repeats, warmups, cfg.request_timeout_s, args.repo, args.label, at,
            )
        )  # fmt: skip
        duration += sum(seconds for _, seconds in runs)
        for k, (run, seconds) in enumerate(runs):
            if at is None:
                records += run
                continue
            index = k * len(levels) + j
            records += [r.model_copy(update={"window": index}) for r in run]
            tokens = sum(r.completion_tokens for r in run)
            windows.append(
                Window(
                    index=index,
                    concurrency=at.primary,
                    requests=len(run),
                    output_tokens=tokens,
                    wall_s=seconds,
                )
            )
    windows.sort(key=lambda x: x.index)
    m = summarize(args.label, args.tree_sha256, records, n, duration, windows or None)
    return m.model_copy(update={"client": client.client_name(module, version)})


@tool("bench.outputs")
def outputs(args: OutputsArgs) -> OutputsResult:
    """Greedy texts of every prompt one at a time, then of the first `concurrent` (or those
    `together` names) sent together; with `stagger`, that batch again staggered."""
    t0 = time.perf_counter()

    def text(prompt: str) -> str:
        return stream_completion(
            args.base_url, chat_body(args.model, prompt, args.max_tokens), args.timeout_s
        )[1]

    sequential = []
    for i, prompt in enumerate(args.prompts):
        report(
            f"correctness set: request {i + 1}/{len(args.prompts)} ({len(prompt)} characters in, "
            f"up to {args.max_tokens} tokens back)"
        )
        sequential.append(text(prompt))
    chosen = range(args.concurrent) if args.together is None else args.together
    batch = [args.prompts[i] for i in chosen]
    concurrent = []
    if batch:
        report(f"correctness set: {len(batch)} requests at once")
        with ThreadPoolExecutor(len(batch)) as pool:
            concurrent = list(pool.map(text, batch))
    staggered = []
    if batch and args.stagger:
        report(f"correctness set: {len(batch)} requests staggered")
        staggered = staggered_texts(args, batch)
    return OutputsResult(
        sequential=sequential,
        concurrent=concurrent,
        staggered=staggered,
        duration_s=time.perf_counter() - t0,
    )


def staggered_texts(args: OutputsArgs, batch: list[str]) -> list[str]:
    """Greedy texts of `batch`, each request sent once the one before it has streamed its first
    token (or failed): every request joins the others mid-decode, a schedule unlike all at once."""
    started = [threading.Event() for _ in batch]

    def text(k: int) -> str:
        if k > 0:
            started[k - 1].wait(args.timeout_s)
        try:
            body = chat_body(args.model, batch[k], args.max_tokens)
            return stream_completion(args.base_url, body, args.timeout_s, on_first=started[k].set)[1]
        finally:
            started[k].set()

    with ThreadPoolExecutor(len(batch)) as pool:
        return list(pool.map(text, range(len(batch))))
