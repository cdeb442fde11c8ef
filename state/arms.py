"""How a candidate's arms are measured when `[decide] arms = "auto"`: whether two servers fit the
host (a door tool's measurement), the resolved choice, and per-launch locations of alternating
relaunches."""

from typing import Literal

from state.base import Model

ArmsInUse = Literal["sequential", "interleaved", "alternating"]
"""The arms a session measures with (`auto` resolved)."""


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
    """One launch of alternating arms: its location (mean over prompts of the median log TPOT, or
    the median window cost under `[workload]`)."""

    arm: Literal["reference", "candidate"]
    """Which tree it ran."""
    launch_number: int
    """The session's launch number."""
    location_log: float
    """Its location on the log scale (lower is faster)."""
