"""What perfloop knows of a vLLM target beyond any engine's: its step hook's lookup and the phase
scopes of its traces (tools/vllm/ reads and finds them; docs/VLLM.md)."""

from pathlib import Path

from pydantic import Field

from state.base import Model
from state.engines.sglang import HookSite


class VllmSiteArgs(Model):
    """A vLLM checkout and the environment its server is launched with."""

    repo: Path
    """Top-level directory of the checkout (holding `vllm/`)."""
    env: dict[str, str] = {}
    """The launch environment (`VLLM_USE_V2_MODEL_RUNNER` on is refused: see tools/vllm/hook.py)."""


class EngineSiteArgs(VllmSiteArgs):
    """A checkout of an engine registered from outside, its launch environment, and its kind."""

    kind: str
    """The engine's name (`[target] kind`), as its entry point registers it."""


class EngineSite(Model):
    """Where an engine's own `hook_site` puts the dormant profiler (None: the target's `[profile]`)."""

    hook: HookSite | None = None
    """The per-step method it wraps, found from the tree."""


class DecodePhases(Model):
    """Mean time per decode step of each vLLM phase scope (`gpu_model_runner: <phase>`), and
    whether the host's phases outweigh the model's forward (tools/vllm/trace.py reads them)."""

    steps: int = Field(ge=0)
    """Pure-decode steps (`execute_context_0(0)_...` markers) in the trace."""
    step_ms: float = Field(ge=0)
    """Mean wall of a decode step's marker, in ms."""
    phase_ms: dict[str, float]
    """Mean ms per decode step of each `gpu_model_runner: <phase>` scope inside the steps."""
    host_ms: float = Field(ge=0)
    """preprocess + postprocess + sample + bookkeep per step, in ms."""
    forward_ms: float = Field(ge=0)
    """The model's forward per step, in ms."""
    host_bound: bool
    """Whether the host phases outweigh the forward."""

    def line(self) -> str:
        """One line for a report."""
        parts = ", ".join(f"{k} {v:.3f}" for k, v in self.phase_ms.items())
        kind = "host-bound" if self.host_bound else "model-bound"
        return (
            f"{kind} decode over {self.steps} steps of {self.step_ms:.3f} ms: host {self.host_ms:.3f} ms "
            f"vs forward {self.forward_ms:.3f} ms a step ({parts} ms)"
        )
