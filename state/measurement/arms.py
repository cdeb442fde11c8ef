"""How a candidate's arms are measured when `[decide] arms = "auto"`: whether two servers fit the
host (a door tool's measurement), the resolved choice, and per-launch locations of alternating
and cross-host relaunches."""

from typing import Literal

from pydantic import Field

from state.base import Model

ArmsInUse = Literal["sequential", "interleaved", "alternating", "cross-host"]
"""The arms a session measures with (`auto` resolved)."""


class ArmsConfig(Model):
    """The `[decide]` fields on how a candidate's arms are measured and how many requests, looks, A/A
    pairs and launches they get (`DecisionConfig` has them)."""

    arms: Literal["auto", "sequential", "interleaved", "alternating", "cross-host"] = "auto"
    """`sequential`: the reference arm is the earlier launch's measurement and the candidate runs
    after it (one launch per candidate; the arms see different machine states). `interleaved`:
    the reference tree is launched again beside the candidate (a second checkout, a second
    server) and requests alternate between the two, so both arms see the same machine state; it
    needs room for two servers and costs one more launch per candidate. `alternating`: the two
    trees launched in turn on the same host, one server at a time, each up to
    `max_launches_per_arm` times, the launch effect estimated from those launches. `cross-host`:
    the reference on another of the target's `[[hosts]]` (`reference_host`) at the same time as
    the candidate here, the two hosts swapping arms every round (a crossover: the hosts' own speed
    difference cancels). `auto`: interleaved when two servers fit (`two_servers_fit`, else
    measured on the baseline server), otherwise cross-host when `reference_host` is set, otherwise
    alternating."""
    two_servers_fit: bool | None = None
    """`arms = "auto"`: whether a second server fits beside the first (None: measure it)."""
    fit_margin: float = Field(1.2, ge=1)
    """`auto`: free memory must hold the server's own use times this to count as a fit."""
    max_launches_per_arm: int = Field(4, ge=2, le=20)
    """Alternating arms: most launches of each tree per candidate (the plan's bound); cross-host
    arms: most rounds (each round one launch of each tree, one on each host)."""
    reference_host: str | None = None
    """Cross-host arms (`arms = "cross-host"`, or `auto` where two servers do not fit): the name of
    the target's `[[hosts]]` entry that runs the other arm; None: none."""
    auto_aa_pairs: int = Field(3, ge=0, le=10)
    """Interleaved arms: while the A/A store holds fewer than `min_aa_pairs` pairs of this target
    on this host (or, with `keep_gain`, while the launch noise alone keeps it out of reach), the
    baseline step launches the tree again beside the baseline server, up to this many times per
    session, and keeps each pair (one launch each). Sequential arms: while the store holds no
    measured launch noise of this target on this host, the baseline step launches the tree once
    more and keeps both launches (one launch a session). 0: never, calibrate by hand."""
    keep_gain: float | None = Field(None, gt=0)
    """The true gain the session should keep (0.05: 1.05x, with `keep_power`): the baseline step
    chooses requests per look and looks for it, up to `max_requests_per_prompt`; alternating arms
    plan their launches per arm for it (1.05x when None); None: `repeats` and `looks` as given
    (the power is reported either way)."""
    max_requests_per_prompt: int = Field(60, ge=2)
    """Budget for `keep_gain`: most requests per prompt per arm over all looks."""
    keep_power: float = Field(0.8, ge=0.5, le=0.99)
    """The probability with which the power line's gain (and `keep_gain`) is to be kept: the
    requests, looks and alternating launches are planned for it (0.9 asks for more of them)."""


class MemoryFitArgs(Model):
    """Measure whether a second copy of the running server would fit beside it."""

    pgid: int
    """The running server's process group (its processes are the server's)."""


class MemoryFit(Model):
    """What the host has free against what the server holds, on the tightest device."""

    device: Literal["gpu", "cpu"]
    """`gpu`: the server holds GPU memory (nvidia-smi); `cpu`: none, so host memory vs its RSS."""
    server_bytes: int
    """Memory the server holds on the tightest device (GPU: of its processes, per GPU; CPU: RSS)."""
    free_bytes: int
    """Memory free there now (GPU: memory.free; CPU: MemAvailable)."""
    where: str
    """Which device, e.g. `GPU 0` or `host memory`."""
    note: str = ""
    """How the figures were read where it matters (e.g. the server's processes not visible)."""


class HostKindArgs(Model):
    """Ask a host what its servers compute on."""

    cuda_visible_devices: str | None = None
    """`CUDA_VISIBLE_DEVICES` of its servers' environment (`launch.env`, a `[[hosts]]` entry's
    over it): the GPUs they see; None: the host's own environment's."""


class HostKind(Model):
    """What a host's servers compute on: the GPUs they see, and the CPU."""

    gpus: list[str] = Field(default_factory=list)
    """The names of the GPUs its servers see (nvidia-smi), in their order; none without a GPU."""
    cpu: str = ""
    """The CPU's model name (/proc/cpuinfo)."""

    def describe(self) -> str:
        """`2 x NVIDIA H200` or `no GPU, CPU Intel(R) Xeon(R) ...`."""
        if not self.gpus:
            return f"no GPU, CPU {self.cpu or 'unknown'}"
        names = sorted(set(self.gpus))
        return ", ".join(f"{self.gpus.count(n)} x {n}" for n in names)

    def same_as(self, other: "HostKind") -> bool:
        """Of the same kind: the same GPUs (names and count); without GPUs on either, the same CPU."""
        if self.gpus or other.gpus:
            return sorted(self.gpus) == sorted(other.gpus)
        return self.cpu == other.cpu


class ArmsChoice(Model):
    """`arms = "auto"` resolved once, on the baseline server, and kept in the state (resume and
    replay make the same choice)."""

    arms: ArmsInUse
    """The arms every candidate of the session is measured with."""
    why: str
    """One line: what decided it."""
    fit: MemoryFit | None = None
    """The measurement, when the target file did not say (`[decide] two_servers_fit`)."""


class LaunchLocation(Model):
    """One launch of alternating or cross-host arms: its location (mean over prompts of the median
    log TPOT, or the median window cost under `[workload]`)."""

    arm: Literal["reference", "candidate"]
    """Which tree it ran."""
    launch_number: int
    """The session's launch number."""
    location_log: float
    """Its location on the log scale (lower is faster)."""
    host: str | None = None
    """Cross-host arms: the host it ran on (the `[[hosts]]` name, or the session's host as its
    `target_key` names it, e.g. `local`); None: alternating arms (the session's host)."""
