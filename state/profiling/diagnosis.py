"""What the diagnose step concluded from a profile: ranked findings with their evidence."""

from typing import Literal

from pydantic import Field

from state.base import Model
from state.engines.vllm import DecodePhases
from state.profiling.profile import KernelStat, OpStat


class Evidence(Model):
    """One operator group that supports a finding."""

    op: str
    """Operator (or kernel) name."""
    dims: list[list[int]]
    """Input dims of the group."""
    self_us: float = Field(ge=0)
    """Self time of the group over the whole profile, in microseconds."""
    share: float = Field(ge=0, le=1)
    """self_us as a fraction (0..1) of the profile's total self time."""
    calls: int = Field(ge=0)
    """How many times the operator ran with these dims."""
    note: str
    """One line saying why this group matters (from the playbook's evidence template)."""
    location: str | None = None
    """Source `file.py:line (function)` that called the operator, when the trace has stacks."""


class Roofline(Model):
    """What an operator's memory traffic should cost at the device's bandwidth, against what it took."""

    op: str
    """The operator whose bytes are known."""
    bytes_per_call: int = Field(ge=0)
    """Bytes read plus written by one call (e.g. N*576*(1+2) for an FP8 -> BF16 cast of [N, 1, 576])."""
    bandwidth_gbs: float = Field(gt=0)
    """Memory bandwidth assumed, in GB/s (1e9 bytes per second)."""
    bandwidth_source: str
    """Where the bandwidth came from: the device table (`NVIDIA H200`), a flag, or a measurement."""
    ideal_us_per_call: float = Field(ge=0)
    """bytes_per_call at bandwidth_gbs, in microseconds."""
    measured_us_per_call: float = Field(ge=0)
    """Measured self time per call, in microseconds."""
    line: str
    """The comparison in one sentence."""


class StepEffect(Model):
    """What a fix does to one decode step, in the terms of the step's bounds (StepBounds)."""

    device_removed_us: float = Field(default=0.0, ge=0)
    """Device time per step the fix removes, in microseconds."""
    kernels_removed: float = Field(default=0.0, ge=0)
    """Kernels per step the fix removes (fusion): fewer to launch, fewer gaps in a graph replay."""
    graphs: bool = False
    """The fix replays the step as one CUDA graph: the host issues one launch instead of every
    kernel (no change when the trace already shows graph launches)."""


class Finding(Model):
    """A suspected bottleneck: a matched playbook, or the generic top-operator finding."""

    playbook: str
    """Id of the matched playbook, or "generic" when no playbook matched."""
    title: str
    """One-line title."""
    confidence: float = Field(ge=0, le=1)
    """How sure the match is (0..1): the playbook's declared confidence; low for "generic"."""
    expected_gain_share: float = Field(ge=0, le=1)
    """Fraction (0..1) of decode time a fix should remove; 0 when unknown (generic)."""
    expected_gain_ms: float | None
    """expected_gain_share times the baseline TPOT, in ms; None without a TPOT or a known gain."""
    explanation: str
    """What the bottleneck is and what fixes it."""
    evidence: list[Evidence]
    """The operator groups behind the finding, heaviest first."""
    roofline: Roofline | None = None
    """The bandwidth cost of the heaviest evidence operator, where its bytes are known."""
    step_ms: float | None = None
    """The profiled decode step, in ms (ProfilerStep wall time; else device or CPU time per step)."""
    decode_path: Literal["eager-decode", "graph-decode"] | None = None
    """How the matched decode ran: `graph-decode` when matched by kernels replayed in CUDA graphs
    (playbooks/match.py `match_graph`), `eager-decode` when by operators; None for generic."""
    patch: str | None = None
    """The `[patches]` key whose patch covers that path on the target (playbooks/patches.py
    `covering`); None when none does, or the playbook does not say which paths its patches cover."""
    patch_note: str | None = None
    """One line: which patch covers the path, or why none does; None where `patch` is not chosen."""
    predicted_step_ms: float | None = None
    """The step predicted after this fix alone, in ms: with the trace's step bounds, the bound that
    remains (removing device work from a launch-bound step predicts little); else step_ms x
    (1 - expected_gain_share). None when unknown (generic)."""
    predicted_speedup: float | None = None
    """step_ms / predicted_step_ms; None when unknown."""
    predicted_speedup_low: float | None = None
    """The least speedup predicted over the step windows (and, without a TPOT, over the profiler's
    host inflation seen in the corpus); None when unknown."""
    predicted_speedup_high: float | None = None
    """The most speedup predicted over the same windows and inflations; None when unknown."""
    bound: str | None = None
    """What bounds the profiled step: `host launch` (issuing kernels takes longer than running
    them) or `device`; None when unknown (a trace without kernels, or without step windows)."""
    bound_after: str | None = None
    """What would bound the step after this fix alone."""
    effect: StepEffect | None = None
    """The fix in the step's terms, when its gain model has one."""
    paired_with: str | None = None
    """Another finding whose fix, together with this one, is predicted to gain far more than either
    alone (e.g. a cast fix and CUDA graphs on an eager, launch-bound step)."""
    paired_speedup: float | None = None
    """The predicted speedup of this fix and `paired_with` together."""
    basis: str | None = None
    """What the prediction assumed, in one line: the bound and the step windows it was measured
    over (and how they were found), the model's terms before and after, the physical floor, the
    paired fix; `unknown: ...` when the trace gives no step bounds (then no number is predicted)."""


class Diagnosis(Model):
    """The outcome of matching every playbook against one profile."""

    findings: list[Finding]
    """Findings, most promising first (confidence times expected gain, then share)."""
    top_ops: list[OpStat]
    """The profile's ten heaviest operator groups."""
    time_basis: Literal["device", "cpu"]
    """Whether shares are of device time or CPU time."""
    steps: int | None = None
    """Profiled decode steps behind the times (None in older recordings)."""
    step_us: float | None = None
    """Measured time of one profiled step, in us (None in older recordings)."""
    step_source: str | None = None
    """How the profile's steps were found (ProfileSummary.step_source); None: unknown."""
    kernels: list[KernelStat] = Field(default_factory=list)
    """The heaviest kernels when decode ran in CUDA graphs (the operator table then shows one
    `CUDA graph` row hiding what runs inside it); empty otherwise."""
    decode_phases: DecodePhases | None = None
    """vLLM's phase scopes over the profile's decode steps: host-bound or model-bound decode (the
    launch-option search predicts a batch-size change's gain from it); None for other traces."""
    device_name: str | None = None
    """The GPU the trace names (`NVIDIA H200`, its deviceProperties); None: a CPU trace, or one
    diagnosed before it was kept (the memory-bandwidth floor looks its bandwidth up by it)."""


class DiagnosisContext(Model):
    """What the diagnose step knows beyond the profile."""

    target_kind: str
    """Kind of target being tuned (`mla_server`, `sglang`): selects a playbook's patch."""
    active_tokens: int = Field(ge=1)
    """Most tokens live in the KV cache during profiling (prompt + completion, all requests)."""
    tpot_ms: float | None = None
    """Baseline time per output token in ms, to turn expected shares into milliseconds."""
    bandwidth_gbs: float | None = None
    """Device memory bandwidth in GB/s for roofline lines; None: look the profile's device up in
    playbooks.roofline.DEVICE_BANDWIDTH_GBS (no roofline if it is not there)."""
    bandwidth_source: str = "flag"
    """Where bandwidth_gbs came from (`flag`, `measured host copy`), shown in the roofline line."""
    sglang_version: str | None = None
    """The SGLang release of the target (X.Y.Z), for the patch covering a path; None: the newest."""
    host_inflation: float | None = Field(default=None, gt=0)
    """How many times longer the profiler made the host's part of a GPU trace's step than serving
    takes, used when no TPOT is given; None: playbooks.spread.HOST_INFLATION (fitted on H200
    traces), 1.0: the trace's host times are taken as served."""
