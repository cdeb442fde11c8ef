"""The benchmark client: streamed chat completions at temperature 0, timed per token.

Timing is taken per request (TTFT, inter-token latencies) as sglang's bench_serving does, and turned
into statistics by pure functions, separate from the HTTP I/O.
"""

from __future__ import annotations

import http.client
import itertools
import json
import random
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from state.calls import MeasureArgs, MeasureResult, PairArgs, PairResult
from state.decision import OutputsArgs, OutputsResult
from state.measure import Measurement, RequestRecord, Stat, Window
from state.workload import WorkloadConfig
from tools.door import tool
from tools.errors import ConfigError, ServerError
from tools.progress import report
from tools.sglang.bench import bench_range_ratio, find_bench, run_bench


def chat_body(model: str, prompt: str, max_tokens: int) -> dict:
    """A streamed, greedy chat completion request (pure)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def sse_data(lines: Iterator[bytes]) -> Iterator[dict]:
    """Parse `data: {...}` lines of a server-sent event stream until `data: [DONE]` (pure)."""
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


def stream_completion(base_url: str, body: dict, timeout_s: float) -> tuple[list[float], str, dict]:
    """Send one streamed request; return (arrival time of each content delta, text, usage)."""
    url = urlsplit(base_url)
    if not url.hostname:
        raise ConfigError(f"server URL {base_url!r} names no host; use http://HOST:PORT")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    try:
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ServerError(
                f"completion request failed with HTTP {resp.status}: "
                f"{resp.read().decode(errors='replace')[:200]}"
            )
        arrivals: list[float] = []
        parts: list[str] = []
        usage: dict = {}
        for event in sse_data(iter(resp.readline, b"")):
            for choice in event.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    arrivals.append(time.perf_counter() - t0)
                    parts.append(content)
            usage = event.get("usage") or usage
        return arrivals, "".join(parts), usage
    except (OSError, http.client.HTTPException) as exc:
        raise ServerError(f"completion request to {base_url} failed: {exc}") from exc
    finally:
        conn.close()


def to_record(prompt_index: int, arrivals: list[float], text: str) -> RequestRecord:
    """Per-request timing record from delta arrival times in seconds (pure)."""
    if not arrivals:
        raise ServerError(f"prompt {prompt_index}: the server streamed no tokens")
    itl = [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
    return RequestRecord(
        prompt_index=prompt_index,
        ttft_ms=arrivals[0] * 1000,
        itl_ms=itl,
        text=text,
        completion_tokens=len(arrivals),
    )


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
        tpot_ms=stat([r.tpot_ms for r in records]),
        ttft_ms=stat([r.ttft_ms for r in records]),
        output_tok_per_s=sum(r.completion_tokens for r in records) / wall_s,
        outputs=[by_prompt[i][0] for i in range(n_prompts)],
        outputs_stable=all(len(set(texts)) == 1 for texts in by_prompt.values()),
        requests=records,
        windows=windows or [],
    )


@tool("bench.measure")
def measure(args: MeasureArgs) -> MeasureResult:
    """Measure with sglang.bench_serving where asked and present, else with perfloop's client."""
    python = args.config.bench_serving.python.replace("{python}", args.python)
    found = find_bench(python) if args.bench_serving != "never" else None
    if found is None and args.bench_serving == "always":
        raise ConfigError(
            f'measure.bench_serving.use = "always" but {python} has no sglang with '
            "bench_serving; install sglang there, or set measure.bench_serving.python"
        )
    before = machine_probe_ms()
    if found:
        m = measure_with_bench_serving(args, python, *found)
    elif args.workload is not None:
        m = measure_windows(args, args.workload)
    else:
        m = measure_with_client(args)
    return MeasureResult(measurement=m.model_copy(update={"probe_ms": [before, machine_probe_ms()]}))


def measure_with_client(args: MeasureArgs) -> Measurement:
    """Warm up, then send every prompt `repeats` times, one request at a time."""
    cfg = args.config
    warm_up(args)
    records: list[RequestRecord] = []
    total = cfg.repeats * len(cfg.prompts)
    t0 = time.perf_counter()
    for _rep in range(cfg.repeats):
        for i, prompt in enumerate(cfg.prompts):
            report(f"measuring {args.label}: request {len(records) + 1}/{total}")
            arrivals, text, _ = stream_completion(
                args.base_url, chat_body(args.model, prompt, cfg.max_tokens), cfg.request_timeout_s
            )
            records.append(to_record(i, arrivals, text))
    return summarize(args.label, args.tree_sha256, records, len(cfg.prompts), time.perf_counter() - t0)


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
    """One window: `concurrency` requests in flight (each worker starts the next request as its
    last one ends; under `request_rate` not before the request's arrival) until `requests` were
    sent or `duration_s` passed (and every prompt was sent)."""
    items = workload_prompts(w)
    counter, lock = itertools.count(), threading.Lock()
    due = arrivals(w, index) if w.request_rate is not None else itertools.repeat(0.0)
    t0 = time.perf_counter()
    deadline = t0 + w.duration_s if w.duration_s is not None else None

    def worker() -> list[RequestRecord]:
        done: list[RequestRecord] = []
        while True:
            with lock:
                i, at = next(counter), t0 + next(due)
            if w.requests is not None and i >= w.requests:
                return done
            if deadline is not None and i >= len(items) and max(at, time.perf_counter()) >= deadline:
                return done
            time.sleep(max(0.0, at - time.perf_counter()))
            prompt, max_tokens = items[i % len(items)]
            start = time.perf_counter() - t0
            times, text, _ = stream_completion(
                args.base_url, chat_body(args.model, prompt, max_tokens), args.config.request_timeout_s
            )
            rec = to_record(i % len(items), times, text)
            done.append(rec.model_copy(update={"window": index, "start_ms": start * 1000}))

    with ThreadPoolExecutor(w.concurrency) as pool:
        futures = [pool.submit(worker) for _ in range(w.concurrency)]
        records = sorted((r for f in futures for r in f.result()), key=lambda r: r.start_ms or 0.0)
    wall = time.perf_counter() - t0
    tokens = sum(r.completion_tokens for r in records)
    return records, Window(
        index=index, concurrency=w.concurrency, requests=len(records), output_tokens=tokens, wall_s=wall
    )


def measure_windows(args: MeasureArgs, w: WorkloadConfig) -> Measurement:
    """`warmup_windows` discarded, then `repeats` windows of the workload on one server."""
    n = w.warmup_windows
    for k in range(n):
        report(f"measuring {args.label}: warm-up window {k + 1}/{n} at concurrency {w.concurrency}")
        run_window(args, w, -1)
    records: list[RequestRecord] = []
    windows: list[Window] = []
    for k in range(args.config.repeats):
        report(f"measuring {args.label}: window {k + 1}/{args.config.repeats} at concurrency {w.concurrency}")
        recs, window = run_window(args, w, k)
        records += recs
        windows.append(window)
    wall = sum(x.wall_s for x in windows)
    return summarize(args.label, args.tree_sha256, records, w.prompts, wall, windows)


def warm_up(args: MeasureArgs) -> None:
    """Send the config's warm-up requests (their timings are discarded)."""
    cfg = args.config
    for i in range(cfg.warmup_requests):
        stream_completion(
            args.base_url,
            chat_body(args.model, cfg.prompts[i % len(cfg.prompts)], cfg.max_tokens),
            cfg.request_timeout_s,
        )


def pair_order(repeat: int, prompt_index: int) -> tuple[int, int]:
    """Which arm goes first for this request pair: ABBA over repeats and prompts, so neither arm
    is always the one that runs right after the other (pure). 0 = reference, 1 = candidate."""
    return (0, 1) if (repeat + prompt_index) % 2 == 0 else (1, 0)


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
                arrivals, text, _ = stream_completion(
                    a.base_url, chat_body(a.model, prompt, cfg.max_tokens), cfg.request_timeout_s
                )
                records[which].append(to_record(i, arrivals, text))
    wall = (time.perf_counter() - t0) / 2
    probes = [before, machine_probe_ms()]
    ref, cand = (
        summarize(a.label, a.tree_sha256, recs, len(cfg.prompts), wall).model_copy(
            update={"probe_ms": probes}
        )
        for a, recs in zip(arms, records, strict=True)
    )
    return PairResult(reference=ref, candidate=cand)


def measure_pair_windows(arms: tuple[MeasureArgs, MeasureArgs], w: WorkloadConfig) -> PairResult:
    """`[workload]` arms interleaved by window: each arm's warm-up windows, then `repeats` rounds
    of one window on each server, which goes first alternating (ABBA)."""
    for a in arms:
        for _ in range(w.warmup_windows):
            run_window(a, w, -1)
    before = machine_probe_ms()
    records: tuple[list[RequestRecord], list[RequestRecord]] = ([], [])
    windows: tuple[list[Window], list[Window]] = ([], [])
    reps = arms[0].config.repeats
    for k in range(reps):
        report(f"measuring both arms, interleaved: window pair {k + 1}/{reps} at concurrency {w.concurrency}")
        for which in pair_order(k, 0):
            recs, window = run_window(arms[which], w, k)
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


def measure_with_bench_serving(args: MeasureArgs, python: str, module: str, version: str) -> Measurement:
    """`repeats` runs of bench_serving over `len(prompts)` seeded prompts, summarized like the
    client's; under `[workload]` each run is one window of `requests` prompts at its concurrency
    (the warm-up windows' requests sent as bench_serving's warm-up)."""
    cfg, w = args.config, args.workload
    n = len(cfg.prompts) if w is None else need_requests(w)
    warmups = cfg.warmup_requests if w is None else w.warmup_windows * n
    runs = run_bench(
        python,
        module,
        cfg.bench_serving,
        args.base_url,
        args.model,
        n,
        cfg.max_tokens,
        cfg.repeats,
        warmups,
        cfg.request_timeout_s,
        args.repo,
        args.label,
        w,
    )
    records = [r for run, _ in runs for r in run]
    duration = sum(seconds for _, seconds in runs)
    windows = None
    if w is not None:
        records = []
        windows = []
        for k, (run, seconds) in enumerate(runs):
            records += [r.model_copy(update={"window": k}) for r in run]
            tokens = sum(r.completion_tokens for r in run)
            windows.append(
                Window(
                    index=k,
                    concurrency=w.concurrency,
                    requests=len(run),
                    output_tokens=tokens,
                    wall_s=seconds,
                )
            )
    m = summarize(args.label, args.tree_sha256, records, n, duration, windows)
    return m.model_copy(update={"client": f"{module} (sglang {version})"})


def need_requests(w: WorkloadConfig) -> int:
    """A bench_serving window's request count (its runs are counted, not timed) (pure)."""
    bench_range_ratio(w)  # one clear line for what bench_serving cannot draw
    assert w.requests is not None  # bench_range_ratio refused a duration
    return w.requests


@tool("bench.outputs")
def outputs(args: OutputsArgs) -> OutputsResult:
    """Greedy texts of every prompt one at a time, then of the first `concurrent` (or those
    `together` names) sent together."""
    t0 = time.perf_counter()

    def text(prompt: str) -> str:
        return stream_completion(
            args.base_url, chat_body(args.model, prompt, args.max_tokens), args.timeout_s
        )[1]

    sequential = []
    for i, prompt in enumerate(args.prompts):
        report(f"correctness set: request {i + 1}/{len(args.prompts)}")
        sequential.append(text(prompt))
    chosen = range(args.concurrent) if args.together is None else args.together
    batch = [args.prompts[i] for i in chosen]
    concurrent = []
    if batch:
        report(f"correctness set: {len(batch)} requests at once")
        with ThreadPoolExecutor(len(batch)) as pool:
            concurrent = list(pool.map(text, batch))
    return OutputsResult(sequential=sequential, concurrent=concurrent, duration_s=time.perf_counter() - t0)
