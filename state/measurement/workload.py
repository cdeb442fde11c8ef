"""`[workload]` in a target file: the measurement as a server sees it in use, requests at concurrency.

Without it perfloop sends the `[measure]` prompts one at a time and the unit of evidence is a
request. With it each measurement is a run of windows: in a window `concurrency` requests are kept
in flight (closed loop: one ends, the next starts) until `requests` have been sent or `duration_s`
has passed. Requests of one window share decode batches, so their timings are not independent:
the window, not the request, is the unit of evidence, and the rule compares the arms' windows on
the chosen `objective` (agent/decision/stats/rule.py). Each of `[measure] repeats` is one window.
"""

from typing import Literal

from pydantic import Field, model_validator

from state.base import Model

Objective = Literal[
    "output_throughput", "request_throughput", "goodput", "tpot_p50", "tpot_p99", "ttft_p50", "ttft_p99"
]
"""What a window is judged on."""

OBJECTIVES: dict[str, tuple[str, str, bool]] = {
    "output_throughput": ("output throughput", "tok/s", True),
    "request_throughput": ("request throughput", "req/s", True),
    "goodput": ("goodput", "tok/s", True),
    "tpot_p50": ("TPOT p50", "ms", False),
    "tpot_p99": ("TPOT p99", "ms", False),
    "ttft_p50": ("TTFT p50", "ms", False),
    "ttft_p99": ("TTFT p99", "ms", False),
}
"""Each objective's (name, unit, higher is better)."""


class WorkloadConfig(Model):
    """`[workload]`: requests at concurrency, measured in windows (see the module's docstring)."""

    concurrency: int | list[int]
    """Requests in flight at once within a window (with `request_rate`: at most). A list, e.g.
    `[8, 1]`, measures every level: each of `[measure] repeats` is then one window at each level,
    the decision is judged on the first (the primary) and a regression at any other rejects
    (agent/decision/stats/rule.py `with_levels`)."""
    request_rate: float | None = Field(None, gt=0)
    """Requests per second arriving in a window (open loop: Poisson arrivals drawn from `seed` and
    the window's number, the same for both arms), at most `concurrency` in flight; None: closed
    loop, each request starts when one ends."""
    requests: int | None = Field(None, ge=1)
    """Requests per window (set this or `duration_s`)."""
    duration_s: float | None = Field(None, gt=0)
    """Seconds per window: requests keep starting until then (at least `prompts` of them), and
    the window ends when the last one finishes (set this or `requests`)."""
    prompts: int = Field(8, ge=1)
    """Distinct prompts, drawn once from `seed` and sent in turn (request i of a window sends
    prompt i mod `prompts`), so both arms and every window send the same ones."""
    input_len: list[int] = Field(default_factory=lambda: [32, 128])
    """[shortest, longest] prompt, drawn uniformly per prompt: words of random text for perfloop's
    client (about a token each on BPE tokenizers; the demo's byte tokenizer counts characters),
    tokens for sglang.bench_serving."""
    output_len: list[int] = Field(default_factory=lambda: [16, 64])
    """[fewest, most] tokens generated per request (`max_tokens`), drawn uniformly per prompt."""
    seed: int = 0
    """Seed of the prompts and their lengths."""
    warmup_windows: int = Field(1, ge=0)
    """Windows sent and discarded on each launch before measuring."""
    objective: Objective = "output_throughput"
    """What the rule judges a window on: output tokens/s or requests/s of the window (wall time),
    `goodput` (output tokens/s of the requests that meet `slo_tpot_ms` and `slo_ttft_ms`), or the
    p50/p99 over its requests of TPOT or TTFT."""
    slo_tpot_ms: float | None = Field(None, gt=0)
    """`goodput`: a request counts only with its TPOT at most this (None: no TPOT bound)."""
    slo_ttft_ms: float | None = Field(None, gt=0)
    """`goodput`: a request counts only with its TTFT at most this (None: no TTFT bound)."""

    @model_validator(mode="after")
    def _shape(self) -> "WorkloadConfig":
        """One window size, and length ranges [low, high]."""
        if not self.levels or len(set(self.levels)) < len(self.levels):
            raise ValueError(
                f"[workload] concurrency = {self.concurrency} needs distinct levels, at least one"
            )
        if not all(1 <= c <= 1024 for c in self.levels):
            raise ValueError(f"[workload] concurrency = {self.concurrency}: each level must be in 1..1024")
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError(
                "[workload] needs requests (per window) or duration_s (seconds per window), one of them"
            )
        if self.requests is not None and self.requests < self.prompts:
            raise ValueError(
                f"[workload] requests = {self.requests} is fewer than prompts = {self.prompts}: every "
                "prompt is sent in every window; raise requests or lower prompts"
            )
        for name in ("input_len", "output_len"):
            r = getattr(self, name)
            if len(r) != 2 or not 1 <= r[0] <= r[1]:
                raise ValueError(f"[workload] {name} = {r} is not [low, high] with 1 <= low <= high")
        slo = self.slo_tpot_ms is not None or self.slo_ttft_ms is not None
        if self.objective == "goodput" and not slo:
            raise ValueError('[workload] objective = "goodput" needs slo_tpot_ms or slo_ttft_ms (or both)')
        if slo and self.objective != "goodput":
            raise ValueError('[workload] slo_tpot_ms and slo_ttft_ms apply to objective = "goodput" only')
        if self.output_len[0] < 2:
            raise ValueError("[workload] output_len must start at 2 or more (TPOT needs two tokens)")
        return self

    @property
    def levels(self) -> list[int]:
        """The concurrency levels measured, the primary first."""
        return list(self.concurrency) if isinstance(self.concurrency, list) else [self.concurrency]

    @property
    def primary(self) -> int:
        """The level the decision is judged on: the first listed."""
        return self.levels[0]

    def at(self, level: int) -> "WorkloadConfig":
        """This workload at one concurrency level."""
        return self.model_copy(update={"concurrency": level})

    def meets_slo(self, tpot_ms: float, ttft_ms: float) -> bool:
        """Whether a request with these timings counts towards goodput."""
        return (self.slo_tpot_ms is None or tpot_ms <= self.slo_tpot_ms) and (
            self.slo_ttft_ms is None or ttft_ms <= self.slo_ttft_ms
        )

    def gain(self, before: float, after: float) -> float | None:
        """How many times better `after` is than `before` on the objective: after / before for a
        throughput, before / after for a latency; None where either is not positive (pure)."""
        if before <= 0 or after <= 0:
            return None
        return after / before if OBJECTIVES[self.objective][2] else before / after

    def describe(self) -> str:
        """e.g. `concurrency 8, 16 requests per window, output throughput`."""
        size = f"{self.requests} requests" if self.requests is not None else f"{self.duration_s:g} s"
        if self.request_rate is not None:
            size += f" arriving at {self.request_rate:g}/s"
        slo = [f"TPOT <= {self.slo_tpot_ms:g} ms"] if self.slo_tpot_ms is not None else []
        slo += [f"TTFT <= {self.slo_ttft_ms:g} ms"] if self.slo_ttft_ms is not None else []
        under = f" under {' and '.join(slo)}" if slo else ""
        at = f"concurrency {self.primary}"
        if len(self.levels) > 1:
            more = " and ".join(str(c) for c in self.levels[1:])
            at = f"concurrency {self.primary} (also {more}: a regression there rejects)"
        return f"{at}, {size} per window, judged on {OBJECTIVES[self.objective][0]}{under}"
