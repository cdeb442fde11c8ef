"""Measurements: per-request timings and their statistics."""

from state.base import Model

BURST_MS = 0.05
"""Gaps between a stream's deltas shorter than this are a burst: the API server flushing deltas it
held (vLLM under load: ~8 us apart), not decode steps (no model decodes a token in 50 us)."""


class RequestRecord(Model):
    """One streamed request of the measurement workload (cf. sglang bench_serving's output)."""

    prompt_index: int
    """Index of the prompt in the workload."""
    ttft_ms: float
    """Time to first token."""
    itl_ms: list[float]
    """Inter-token latencies, one per token after the first."""
    text: str
    """Generated text (temperature 0), for the output-equality gate."""
    completion_tokens: int
    """Tokens generated, as counted by the client (one per content delta)."""
    window: int | None = None
    """`[workload]`: the window it was sent in (None: the sequential workload)."""
    start_ms: float | None = None
    """`[workload]`: when it was sent, in ms from its window's start."""

    @property
    def timed(self) -> bool:
        """Whether its stream timed its tokens: a delta after the first, about one token a delta
        (at least half of the tokens after the first in deltas of their own), and a span of decode
        steps, not of a burst (its mean gap, `tpot_ms`, at least `BURST_MS`): a merged or flushed
        stream's gaps are the API server's, not the model's (tools/client/stats.py `timed`). The
        mean, not the median: a client that fell behind reads the deltas it missed in one burst
        (microseconds apart), but the stream's span still holds the decode steps it timed."""
        if not self.itl_ms or 2 * len(self.itl_ms) < self.completion_tokens - 1:
            return False
        return self.tpot_ms >= BURST_MS

    @property
    def tpot_ms(self) -> float:
        """Mean time per output token after the first: the stream's time after its first delta
        over the tokens after the first (a delta may carry several tokens: then `itl_ms` has fewer
        entries than tokens; with one token a delta, the mean inter-delta gap)."""
        if not self.itl_ms:
            return 0.0
        return sum(self.itl_ms) / max(len(self.itl_ms), self.completion_tokens - 1)


class Stat(Model):
    """A median with its spread over repeats."""

    median: float
    """Median."""
    p25: float
    """25th percentile."""
    p75: float
    """75th percentile."""
    min: float
    """Minimum."""
    max: float
    """Maximum."""
    n: int
    """Number of samples."""

    @property
    def iqr(self) -> float:
        """Interquartile range: the spread used as measured noise."""
        return self.p75 - self.p25


class Window(Model):
    """One window of a `[workload]` measurement: requests kept in flight at a concurrency."""

    index: int
    """Its number within the measurement (0-based; its requests carry it as `window`)."""
    concurrency: int
    """Requests in flight at once."""
    requests: int
    """Requests completed in it."""
    output_tokens: int
    """Tokens its requests generated."""
    wall_s: float
    """Seconds from its start (when its first requests are sent; under a request rate, the
    clock its arrival times count from) to its last request's end."""


class Measurement(Model):
    """The workload measured once against a running server."""

    label: str
    """What was measured, e.g. `baseline` or `iteration-1`."""
    client: str = "perfloop"
    """Which client measured: `perfloop`, or e.g. `sglang.bench_serving (sglang 0.5.9)`."""
    tree_sha256: str
    """Fingerprint of the working tree the server ran."""
    tpot_ms: Stat
    """Per-request mean time per output token."""
    ttft_ms: Stat
    """Per-request time to first token."""
    output_tok_per_s: float
    """Generated tokens per second of wall time over the workload (sequential requests)."""
    outputs: list[str]
    """Generated text per prompt (from the first repeat), in prompt order."""
    outputs_stable: bool
    """Whether every repeat of each prompt produced the same text."""
    requests: list[RequestRecord]
    """Every measured request (warm-ups excluded)."""
    warmups_discarded: int = 0
    """Warm-up requests sent on this launch before measuring, not counted (recorded since the
    CI rule; older measurements leave it 0)."""
    instrumented: bool | None = None
    """Whether the server ran with the dormant profiler hook in its tree (None: not recorded)."""
    content_sha256: str | None = None
    """Fingerprint of the tree's content (HEAD's tree object plus uncommitted changes, no commit
    dates): equal for equal code, whichever commit or session holds it."""
    probe_ms: list[float] = []
    """How long a fixed CPU-bound loop took on the host before and after the workload (ms, best of
    3 each): how fast the machine ran for this arm, to compare the machine state of two arms."""
    tree_note: str | None = None
    """What the tree held, in words: e.g. `HEAD 1a2b3c4d5e + dormant profiler in mla_server/...`."""
    windows: list[Window] = []
    """`[workload]`: the measured windows (warm-ups excluded), each the rule's unit of evidence;
    empty for the sequential workload."""
    beside: "Measurement | None" = None
    """`measure.bench_serving.use = "both"`: the same launch measured right after by
    sglang.bench_serving with the same workload; recorded and shown beside this measurement's
    figures, never judged (None: one client measured)."""
