"""What a profiler run measured: per-operator time, grouped by operator name and input dims."""

from typing import Literal

from pydantic import Field

from state.base import Model


class OpStat(Model):
    """One operator name called with one set of input dims, summed over the profiled steps."""

    name: str
    """Operator name as the profiler reports it (`aten::copy_`), or a kernel name when no operator
    launched that kernel."""
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


class ProfileSummary(Model):
    """A whole profile reduced to operator groups, heaviest first."""

    source: str
    """Path of the trace or table this summary was read from."""
    time_basis: Literal["device", "cpu"]
    """"device" when kernel times were attributed to operators; "cpu" when only host times exist."""
    steps: int = Field(ge=1)
    """Number of profiled decode steps: the number the caller gave, else the count of
    ProfilerStep#N markers, else of outermost forward_decode calls, else 1."""
    total_self_us: float = Field(ge=0)
    """Sum of self time over every operator group, in microseconds."""
    step_us: float = Field(ge=0)
    """total_self_us divided by steps: the measured time of one decode step, in microseconds."""
    ops: list[OpStat]
    """Operator groups, one per (name, input dims), sorted by self_us, largest first."""
