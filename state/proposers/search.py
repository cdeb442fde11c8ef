"""`[search]` in a target file: launch options searched like patches (agent/proposer/tuning/search.py).

Each trial is a session candidate: the launch command with the knobs' values, relaunched, its
outputs checked and measured with the decision rule against the reference; an accepted config
becomes the new reference.
"""

from typing import Literal

from pydantic import Field, model_validator

from state.base import Model

KnobValue = bool | int | float | str
"""A knob's value: what optuna suggests and what goes into the launch command (as text)."""

HOST_BOUND = "host-bound-decode"
"""The finding a profile with vLLM's phase scopes gives when a decode step's host work outweighs
its forward (`Diagnosis.decode_phases.host_bound`): no playbook's, the search's own."""
IMPLICATED: dict[str, tuple[str, ...]] = {
    "launch-bound-decode": ("--disable-cuda-graph", "--cuda-graph-max-bs", "--cuda-graph-bs"),
    "kv-cache-full-pool-cast": ("--max-total-tokens", "--pool-slots", "--mem-fraction-static"),
    HOST_BOUND: ("--max-num-seqs", "--max-running-requests"),
    "decode-step-fusion": ("--enable-torch-compile",),
}
"""Knobs (by flag) a diagnosis finding implicates when the knob names none itself: they are set to
their `first` value in the first trial (launch-bound decode -> the CUDA-graph flags, a pass over
the whole KV pool -> the pool's size, host-bound decode -> the sequences decoded per step, many
small kernels -> the engine's compile path, SGLang's and the demo's `--enable-torch-compile`)."""


class Knob(Model):
    """One launch flag or environment variable the search may set (`[[search.knobs]]`)."""

    name: str = Field(pattern=r"^(--[A-Za-z0-9][A-Za-z0-9_-]*|[A-Za-z_][A-Za-z0-9_]*)$")
    """The flag (`--cuda-graph-max-bs`) or, with `env = true`, the environment variable's name."""
    env: bool = False
    """An environment variable of the server (the launch command is prefixed `env NAME=VALUE`)
    rather than a flag."""
    type: Literal["int", "float", "choice", "bool"]
    """`int`/`float`: a range (`low`..`high`); `choice`: one of `choices`; `bool`: a flag present
    or absent (an environment variable `1` or `0`)."""
    low: float | None = None
    """Smallest value of an `int` or `float` knob."""
    high: float | None = None
    """Largest value of an `int` or `float` knob."""
    log: bool = False
    """Sample an `int`/`float` range on a log scale (sizes that double)."""
    step: int | None = Field(None, ge=1)
    """Step of an `int` range (e.g. 8 for batch sizes); None: 1."""
    choices: list[int | float | str] = Field(default_factory=list)
    """Values of a `choice` knob, in the launch command's spelling."""
    exact: bool = False
    """Whether the knob declares itself exact (a pool size, a batch cap): a trial that sets only such
    knobs passes the numerics gate only as `exact`."""
    numerics: bool = False
    """Whether the knob may change the server's numerics (an attention backend, a kernel, a compile):
    not searched under `[correctness] policy = "exact"`; after a trial refused for its math, the
    same trial is tried without it (agent/proposer/tuning/refusals.py)."""
    implicated_by: list[str] | None = None
    """Playbook ids whose finding in the diagnosis puts this knob in the first trial; None: the
    built-in table (`IMPLICATED`)."""
    first: KnobValue | None = None
    """The value tried first when the diagnosis implicates this knob (None: TPE picks it)."""

    @model_validator(mode="after")
    def _shape(self) -> "Knob":
        """A range for int/float, choices for choice, nothing for bool."""
        if self.type in ("int", "float"):
            if self.low is None or self.high is None or self.low >= self.high:
                raise ValueError(f"knob {self.name}: type {self.type} needs low < high")
            if self.log and self.low <= 0:
                raise ValueError(f"knob {self.name}: log = true needs low > 0")
        elif self.type == "choice" and len(self.choices) < 2:
            raise ValueError(f"knob {self.name}: type choice needs at least two choices")
        if self.type != "choice" and self.choices:
            raise ValueError(f"knob {self.name}: choices apply to type choice only")
        return self

    def implicated(self, playbook: str) -> bool:
        """Whether a finding of `playbook` implicates this knob."""
        if self.implicated_by is not None:
            return playbook in self.implicated_by
        return self.name in IMPLICATED.get(playbook, ())


class SearchConfig(Model):
    """`[search]`: which launch options to search and how much to spend (`--proposer search`, or
    after the playbooks under `playbook`/`auto`)."""

    knobs: list[Knob] = Field(min_length=1)
    """The knobs, each a flag or an environment variable."""
    max_trials: int = Field(8, ge=1)
    """Most configs tried (each one candidate judged by the rule)."""
    max_launches: int | None = Field(None, ge=1)
    """Most server launches in the session (the baseline's included); a trial that would need more
    is not started. None: only `max_trials` bounds the search."""
    max_minutes: float | None = Field(None, gt=0)
    """Most minutes the search may take, from its first trial's proposal: no trial is started
    when the longest one so far would end past it (the first always starts). None: unbounded."""
    seed: int = 0
    """Seed of the TPE sampler: the same history gives the same next trial (replay, resume)."""
    startup_trials: int = Field(3, ge=1)
    """Trials sampled at random before TPE models the history (optuna's `n_startup_trials`)."""

    @model_validator(mode="after")
    def _unique(self) -> "SearchConfig":
        """Each knob once."""
        names = [k.name for k in self.knobs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"[search] knobs must differ; {', '.join(dup)} appears more than once")
        return self
