"""What a profiler run measured: per-operator and per-kernel time, steps, device idle, host syncs."""

from typing import Literal

from pydantic import Field

from state.base import Model
from state.engines.vllm import DecodePhases


class OpStat(Model):
    """One operator name called with one set of input dims, summed over the profiled steps."""

    name: str
    """Operator name as the profiler reports it (`aten::copy_`), a kernel name when no operator
    launched that kernel, or `CUDA graph` for kernels replayed by cudaGraphLaunch."""
    calls: int = Field(ge=0)
    """How many times the operator ran with these dims."""
    self_us: float = Field(ge=0)
    """Time spent in the operator itself, in microseconds: on the device (time of the kernels it
    launched directly) or on the CPU (duration minus its children's), per the summary's time_basis."""
    total_us: float = Field(ge=0)
    """Time including the operator's children, in microseconds, on the same basis as self_us."""
    share: float = Field(ge=0, le=1)
    """self_us as a fraction (0..1) of the total self time of the profile."""
    input_dims: list[list[int]] = []
    """Dims of each input, in order ([] for scalars, lists of tensors and absent inputs)."""
    input_types: list[str] = []
    """Type of each input as the profiler names it (`c10::Float8_e4m3fn`, `Scalar`, '')."""
    location: str | None = None
    """Source `file.py:line (function)` of the innermost user Python frame that called the operator,
    when the trace was recorded with_stack=True; None otherwise."""


class KernelStat(Model):
    """One GPU kernel (or memcpy/memset) name, summed over the profile."""

    name: str
    """Kernel name as the trace reports it."""
    calls: int = Field(ge=0)
    """How many times it ran."""
    device_us: float = Field(ge=0)
    """Its summed duration on the device, in microseconds."""
    share: float = Field(ge=0, le=1)
    """device_us as a fraction (0..1) of all kernel time."""
    graph_calls: int = Field(default=0, ge=0)
    """How many of the calls were replayed inside a CUDA graph (launched by cudaGraphLaunch)."""


class StepStat(Model):
    """One decode step's window (`ProfileSummary.step_source` says what marked it)."""

    name: str
    """The step marker's name, e.g. `ProfilerStep#12`, `forward_decode #3`, or `step 2` (inferred)."""
    wall_us: float = Field(ge=0)
    """Host duration of the window, in microseconds: a ProfilerStep's own; for other markers and
    inferred steps from its start to the next one's (the last marker: its own duration)."""
    device_us: float = Field(ge=0)
    """Kernel time that started inside the step's window (its start to the next step's), in us."""
    kernels: int = Field(ge=0)
    """Kernels that started inside the step's window."""


class DeviceActivity(Model):
    """How busy the device was between its first and last kernel of each step (or of the trace)."""

    kernels: int = Field(ge=0)
    """Kernels (and memcpys/memsets) in the measured windows."""
    busy_us: float = Field(ge=0)
    """Time at least one kernel ran, in microseconds (overlaps counted once)."""
    span_us: float = Field(ge=0)
    """Summed time from the first kernel's start to the last kernel's end of each window, in us."""
    idle_share: float = Field(ge=0, le=1)
    """(span_us - busy_us) / span_us: the device's idle fraction between kernels."""
    gaps: int = Field(ge=0)
    """Idle gaps of at least 1 us between consecutive kernels."""
    median_gap_us: float = Field(ge=0)
    """Median length of those gaps, in microseconds (0 when there are none)."""
    median_kernel_us: float = Field(ge=0)
    """Median kernel duration, in microseconds."""
    launch_us: float = Field(ge=0)
    """Host time spent in kernel-launch API calls (cudaLaunchKernel, cuLaunchKernel, ...), in us."""
    launch_bound: bool
    """The default verdict: idle_share >= 0.3 and median_kernel_us <= 20 (short kernels, device
    waiting for the CPU to launch the next one). Playbooks apply their own thresholds."""


class WindowBounds(Model):
    """One step window's terms of the step model (StepBounds holds their medians), in us."""

    wall_us: float = Field(ge=0)
    """Host duration of the window, per step."""
    issue_us: float = Field(ge=0)
    """Host time issuing the window's kernels, per step."""
    serial_host_us: float = Field(ge=0)
    """Host time outside the launches and syncs, per step."""
    device_us: float = Field(ge=0)
    """Time at least one kernel of the window ran, per step."""
    residual_us: float
    """wall_us less serial_host_us + max(issue_us, device_us)."""


class StepBounds(Model):
    """What bounds one decode step: the host issuing its work, or the device running it.

    Medians over the step windows of one trace (`windows` says what found them; a merged profile
    keeps the critical rank's, `RankStat.step_bounds` each rank's). The step is modelled as
    `serial_host_us + max(issue_us, device_us) + residual_us`: host work before the first and after
    the last launch does not overlap the device, while launching overlaps the kernels it launches.
    """

    steps: int = Field(ge=1)
    """Step windows measured (steps, for the whole trace divided by a given count)."""
    windows: str = "ProfilerStep"
    """What marked the windows: `ProfilerStep`, `SGLang step[DECODE]`, `forward_decode`, `vLLM
    gpu_model_runner: forward`, `kernel pattern` / `operator pattern` (inferred from the repeating
    work), or `whole trace / N` (the user's step count over the whole trace)."""
    wall_us: float = Field(ge=0)
    """Host duration of a step (its window), in microseconds."""
    host_us: float = Field(ge=0)
    """Host time not blocked in syncs: wall_us minus the time in synchronizing calls, in us."""
    issue_us: float = Field(ge=0)
    """Host time from the step's first launch call to the end of its last (syncs inside left out):
    the time the host needs to issue the step's kernels, in us."""
    serial_host_us: float = Field(ge=0)
    """host_us minus issue_us: host work before the first and after the last launch, in us."""
    device_us: float = Field(ge=0)
    """Time at least one kernel of the step's window ran (overlaps once), in us."""
    residual_us: float
    """wall_us minus the model's `serial_host_us + max(issue_us, device_us)`: what the model does
    not explain (the pipeline's fill and drain, sync latency), kept constant in predictions."""
    kernels: float = Field(ge=0)
    """Kernels (and memcpys/memsets) per step."""
    launches: float = Field(ge=0)
    """Kernel-launch API calls per step (cudaLaunchKernel, cuLaunchKernel, ...)."""
    graph_launches: float = Field(ge=0)
    """CUDA-graph launches per step (cudaGraphLaunch): > 0 when decode replays a captured graph."""
    bound: Literal["host launch", "device"]
    """`host launch` when issuing the kernels takes longer than running them (issue_us >
    device_us): removing device work then gains little; else `device`."""
    per_window: list[WindowBounds] = Field(default_factory=list)
    """Each step window's terms, in time order (empty in profiles recorded before they were kept):
    what a prediction's range is taken over."""


class SyncStat(Model):
    """Host-device synchronizations of one kind from one place."""

    name: str
    """The synchronizing call: cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
    cudaMemcpy, or an operator that copies a device scalar to the host (aten::_local_scalar_dense,
    the work of `.item()`)."""
    caller: str
    """Where it came from: the source location when the trace has stacks, else the enclosing
    operator (e.g. aten::item), else `-`."""
    calls: int = Field(ge=0)
    """How many times it happened."""
    decode_calls: int = Field(ge=0)
    """How many of them were inside the decode path (forward_decode if annotated, else a
    ProfilerStep, else anywhere)."""
    host_us: float = Field(ge=0)
    """Summed host time of the calls (the host waiting for the device), in microseconds."""


class RankStat(Model):
    """One trace file of a multi-file (one per rank) profile."""

    source: str
    """Path of the trace."""
    total_self_us: float = Field(ge=0)
    """Total self time of the file, on the summary's time basis, in microseconds."""
    step_us: float = Field(ge=0)
    """total_self_us per step, in microseconds."""
    step_bounds: StepBounds | None = None
    """This rank's host-against-device bounds over its own step windows; None without windows."""
    step_source: str | None = None
    """How this rank's steps were found (ProfileSummary.step_source)."""
    collective_us: float = Field(0.0, ge=0)
    """Time in collectives (all-reduce, all-gather, reduce-scatter, all-to-all) over the file, in
    microseconds: device time of their kernels on a device trace, else the self time of their
    operators (waiting for the other ranks included). 0 in traces read before it was counted."""
    idle_us: float = Field(0.0, ge=0)
    """Time a rank spent waiting for its next command (host broadcasts from rank 0:
    `gloo:broadcast`), over the file, in microseconds; left out of its step time."""


class CollectiveStats(Model):
    """Collectives across the ranks of a multi-file profile (tools/trace/ranks/collectives.py)."""

    ranks: int = Field(ge=2)
    """Rank files read."""
    share: float = Field(ge=0, le=1)
    """Time in collectives over step time, summed over ranks."""
    rank_step_us: list[float]
    """Each rank's step time, in microseconds, in file order: its ProfilerStep wall time when the
    trace marks steps, else its busy time (total self time minus idle_us) per step."""
    rank_collective_us: list[float]
    """Each rank's time in collectives per step, in microseconds, in file order."""
    spread: float = Field(ge=0)
    """(slowest - fastest) / median of rank_step_us: 0 when the ranks take the same time."""
    wait_us: float = Field(ge=0)
    """Most minus least of rank_collective_us: per step, how long the other ranks wait in
    collectives for the rank that arrives last, in microseconds."""
    transfer_us: float = Field(ge=0)
    """Least of rank_collective_us: the collectives' own time per step with no waiting (the last
    rank to arrive does not wait), in microseconds."""
    straggler: int | None
    """Index (file order) of the rank the others wait for: the least time in collectives, when
    wait_us is at least 10% of the median step; else None."""


class ProfileSummary(Model):
    """A whole profile reduced to operator groups, heaviest first, plus device and step views."""

    source: str
    """Path of the trace or table this summary was read from (several joined by ', ')."""
    time_basis: Literal["device", "cpu"]
    """"device" when kernel times were attributed to operators; "cpu" when only host times exist."""
    steps: int = Field(ge=1)
    """Number of profiled decode steps: the number the caller gave, else the count of the step
    markers or of the inferred steps (`step_source`), else 1."""
    total_self_us: float = Field(ge=0)
    """Sum of self time over every operator group, in microseconds (all ranks)."""
    step_us: float = Field(ge=0)
    """total_self_us divided by steps (and ranks): the measured time of one decode step, in us."""
    ops: list[OpStat]
    """Operator groups, one per (name, input dims), sorted by self_us, largest first."""
    ranks: list[RankStat] = []
    """One entry per trace file when several (ranks) were read together; empty for one file."""
    device_name: str | None = None
    """The GPU's name from the trace's deviceProperties (`NVIDIA H200`); None for CPU traces."""
    kernels: list[KernelStat] = []
    """Kernel names by device time, largest first (empty without device events)."""
    step_stats: list[StepStat] = []
    """One entry per ProfilerStep#N marker, in time order (first rank's trace)."""
    device_activity: DeviceActivity | None = None
    """Idle gaps and the launch-bound verdict; None without device events."""
    syncs: list[SyncStat] = []
    """Host-device synchronizations, most host time first."""
    step_wall_us: float | None = None
    """Mean host duration of a step window, in microseconds; None when no window is known."""
    step_bounds: StepBounds | None = None
    """Host issue time against device time per step; None without step windows or kernels (then
    every per-step bound is unknown)."""
    step_source: str | None = None
    """How the steps were found: the marker (`ProfilerStep`, `forward_decode`, ...), `inferred
    from the kernel pattern: N repeats, ...`, or `whole trace / N`; None: no windows (the whole
    trace counts as the given or one step)."""
    collectives: CollectiveStats | None = None
    """Collective share, rank spread and straggler of a multi-file profile; None for one file."""
    decode_phases: DecodePhases | None = None
    """vLLM's phase scopes over its decode steps (host-bound or model-bound decode); None for
    traces without vLLM's step markers and phase scopes."""

    @property
    def rank_steps(self) -> int:
        """Steps times the ranks read: what sums over every rank's ops and kernels divide by for
        one rank's step (a merged tensor-parallel profile sums each kernel over its ranks)."""
        return self.steps * max(1, len(self.ranks))


class OpDelta(Model):
    """How one operator group changed between two profiles, per step."""

    name: str
    """Operator or kernel name."""
    input_dims: list[list[int]]
    """Input dims of the group."""
    before_us_per_step: float = Field(ge=0)
    """Self time per step in the first profile, in microseconds (0 if absent)."""
    after_us_per_step: float = Field(ge=0)
    """Self time per step in the second profile, in microseconds (0 if absent)."""
    delta_us_per_step: float
    """after minus before, in microseconds per step."""
    status: Literal["grew", "shrank", "appeared", "vanished", "same"]
    """appeared/vanished: absent from one side; same: within max(5%, 1 us) per step."""


class ProfileDiff(Model):
    """The change from one profile to another, by operator group."""

    before: str
    """Source of the first profile."""
    after: str
    """Source of the second profile."""
    time_basis: Literal["device", "cpu"]
    """Basis of the second profile (the two should match; see `note`)."""
    before_step_us: float = Field(ge=0)
    """Step time of the first profile, in microseconds."""
    after_step_us: float = Field(ge=0)
    """Step time of the second profile, in microseconds."""
    ops: list[OpDelta]
    """Changed groups, largest absolute change first (unchanged groups left out)."""
    note: str = ""
    """A warning when the two profiles are on different time bases, else empty."""
