"""The seam between the steps and a decision rule: what a rule does for the loop (`Rule`) and
what it returns (`JudgedCandidate`, `RuleVerdict`).

The rules: `ci-v1` (agent/decision/rules/ci.py, every new session) and the legacy `iqr-v0`
(agent/decision/rules/legacy.py, the rule older recordings replay with); `agent/decision/rules/__init__.py`
gives the one a session was started with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from langgraph.runtime import Runtime

from agent.context import LoopContext
from state.engines.process import ServerHandle
from state.measurement.decision import Judgement, Verdict
from state.measurement.measure import Measurement
from state.measurement.numerics import NumericsVerdict
from state.measurement.tolerance import ToleranceResult
from state.sessions.loop import LoopState
from state.sessions.updates import LoopUpdate


@dataclass(frozen=True)
class JudgedCandidate:
    """What measuring (and, by the CI rule, judging) the running candidate found."""

    measurement: Measurement
    """The candidate's measurement (all its looks merged)."""
    judgement: Judgement | None = None
    """The CI rule's answer with its evidence; None by the IQR rule, or when `problem` stopped it."""
    problem: str | None = None
    """Why it was not timed further: its outputs failed the gate, or the arms were measured unlike."""
    tolerance: ToleranceResult | NumericsVerdict | None = None
    """The tolerance gate's result, or the numerics gate's verdict, when it scored the candidate."""
    gate_note: str | None = None
    """The output gate's line: why the candidate passed or failed (schedule-aware sessions)."""
    launches_beside: int | None = None
    """With interleaved arms: the servers launched beside the candidate (the reference, a
    confirming pair); None when the arms were not interleaved."""
    server: ServerHandle | Literal["unchanged"] | None = "unchanged"
    """Alternating arms: the candidate's server left running (relaunched), or None when none is."""


@dataclass(frozen=True)
class RuleVerdict:
    """A rule's verdict on the judged candidate, for the `Decision`."""

    verdict: Verdict
    """Never `undecided`."""
    reason: str
    """One line: why."""
    noise_ms: float | None = None
    """The noise the gain had to exceed (the IQR rule's)."""


@dataclass(frozen=True)
class MeasuredBaseline:
    """The baseline measured by a rule, with what else the rule keeps from the baseline launch."""

    measurement: Measurement
    """The baseline (it becomes the first reference)."""
    update: LoopUpdate = field(default_factory=LoopUpdate)
    """State the rule sets besides (the launch noise, the gate's reference outputs)."""
    note: str = ""
    """What the rule adds to the step's note (starting with `; `), or nothing."""


class Rule(Protocol):
    """How a session decides whether to keep a candidate (`LoopOptions.decision_rule`)."""

    @property
    def name(self) -> str:
        """As recorded in `LoopOptions.decision_rule`."""
        ...

    @property
    def checks_mechanisms(self) -> bool:
        """Whether the diagnosis keeps the profile's step times and each accepted patch's predicted
        mechanism is recorded and checked against the next profile."""
        ...

    def instruments_candidate(self, state: LoopState) -> bool:
        """Whether the dormant profiler (patch profiling) goes back into the candidate's tree
        before its launch."""
        ...

    def baseline(self, state: LoopState, runtime: Runtime[LoopContext]) -> MeasuredBaseline:
        """Measure the running baseline server."""
        ...

    def judge(self, state: LoopState, runtime: Runtime[LoopContext], label: str) -> JudgedCandidate:
        """Measure the running candidate (and judge it, if the rule judges while measuring)."""
        ...

    def verdict(self, state: LoopState, enables: str | None) -> RuleVerdict:
        """The verdict on the measured candidate (pure); `enables` names the pair an enabling
        step is kept for."""
        ...
