"""The memory-bandwidth floor of a decode step: what the engine knows of its model's bytes
(`ModelFootprint`) and a step's time against the least it could take (`StepFloor`)."""

from typing import Literal

from pydantic import Field

from state.base import Model


class ModelFootprint(Model):
    """What one decode step reads at least, as the engine knows its model from its launch command."""

    weight_bytes: int = Field(ge=0)
    """Bytes of the weights a decode step reads, every GPU's together (each weight once)."""
    kv_bytes_per_token: int = Field(ge=0)
    """KV cache bytes of one token, over every layer."""
    gpus: int = Field(1, ge=1)
    """GPUs the model is spread over (tensor parallel), reading at once."""
    basis: str
    """Where the figures come from, in words (preset, sizes, dtypes)."""


class StepFloor(Model):
    """One step's time against its memory-bandwidth floor: (weights + live KV bytes) over the
    bandwidth of its GPUs, a lower bound (every byte read once, at peak)."""

    label: str
    """`baseline`, `final`, or the chain link's source."""
    role: Literal["baseline", "link", "final"]
    """Which step of the session it is."""
    step_ms: float = Field(ge=0)
    """The step's time: its median TPOT (one decode step gives each running request one token)."""
    floor_ms: float | None = None
    """The floor; None where a figure is missing (`missing` says which)."""
    weight_bytes: int | None = None
    """The weights' bytes read per step (ModelFootprint.weight_bytes)."""
    kv_bytes: int | None = None
    """The live KV cache's bytes; None where no profile counted the live tokens."""
    live_tokens: int | None = None
    """Tokens live in the KV cache (the profile's count, prompt and completion)."""
    bandwidth_gbs: float | None = None
    """One GPU's memory bandwidth, GB/s."""
    gpus: int = Field(1, ge=1)
    """GPUs reading at once."""
    bandwidth_source: str = ""
    """Where the bandwidth comes from: `H100 spec` (the datasheet), or a measurement."""
    missing: str = ""
    """What is missing: why there is no floor, or what the floor leaves out."""

    @property
    def above(self) -> float | None:
        """How many times above its floor the step runs."""
        return self.step_ms / self.floor_ms if self.floor_ms else None

    def line(self) -> str:
        """`step 12.0 ms, floor 4.06 ms (weights 13.6 GB + KV 0.0271 GB at 3.35 TB/s, H100 spec):
        3.0x above`, or `step 12.0 ms, floor unknown (no bandwidth for the CPU)` (pure)."""
        step = f"step {self.step_ms:.1f} ms"
        if self.floor_ms is None or self.bandwidth_gbs is None or self.weight_bytes is None:
            return f"{step}, floor unknown ({self.missing})"
        kv = f" + KV {self.kv_bytes / 1e9:.3g} GB" if self.kv_bytes is not None else ""
        at = f"{self.gpus} x " if self.gpus > 1 else ""
        left = f"; {self.missing}" if self.missing else ""
        above = self.above or 0.0
        times = f"{above:.1f}x" if above < 100 else f"{above:,.0f}x"
        return (
            f"{step}, floor {self.floor_ms:.3g} ms (weights {self.weight_bytes / 1e9:.3g} GB{kv} at "
            f"{at}{self.bandwidth_gbs / 1e3:.3g} TB/s, {self.bandwidth_source}{left}): {times} above"
        )
