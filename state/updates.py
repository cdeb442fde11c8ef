"""What a node of the loop returns to change the state: `LoopUpdate`, the fields of `LoopState` by
name, any subset of them (a test keeps the two equal, so a misspelt key fails the type check).

The list fields LangGraph appends to (`profiles`, `decisions`, `transitions`, `trials`,
`mechanisms`, `model_trials`) take the items to add; every other field takes its new value.
"""

from typing import TypedDict

from state.arms import ArmsChoice
from state.correctness import OutputsResult
from state.decision import Judgement, LaunchNoise, MechanismCheck
from state.diagnosis import Diagnosis
from state.ids import SessionId
from state.limits import LongPrompts
from state.loop import Approval, Decision, ForkStep, ProfileResult, Proposal, Transition
from state.measure import Measurement
from state.options import LoopOptions
from state.power import Power
from state.process import ServerHandle
from state.proposer import LlmUsage, ModelTrial
from state.session import SessionStatus
from state.sglang import SglangLayout
from state.target import TargetConfig
from state.tolerance import ScoreResult, ToleranceResult
from state.trials import Trial
from state.workspace import CommitInfo, InstrumentationRecord, WorkspaceSnapshot


class LoopUpdate(TypedDict, total=False):
    """A node's update of `LoopState` (see there what each field means)."""

    session_id: SessionId
    target: TargetConfig
    options: LoopOptions
    iteration: int
    start: WorkspaceSnapshot | None
    branch: str | None
    checkout: str | None
    sglang: SglangLayout | None
    instrumentation: InstrumentationRecord | None
    server: ServerHandle | None
    launches: int
    baseline: Measurement | None
    reference: Measurement | None
    candidate_measurement: Measurement | None
    correctness: OutputsResult | None
    long_prompts: LongPrompts | None
    tolerance_reference: ScoreResult | None
    tolerance: ToleranceResult | None
    launch_noise: LaunchNoise | None
    power: Power | None
    arms: ArmsChoice | None
    judgement: Judgement | None
    gate_problem: str | None
    profiles: list[ProfileResult]
    diagnosis: Diagnosis | None
    proposal: Proposal | None
    approval: Approval | None
    pending_commit: CommitInfo | None
    launch_argv: list[str] | None
    pending_launch: list[str] | None
    accepted: list[CommitInfo]
    decisions: list[Decision]
    transitions: list[Transition]
    candidates: list[Proposal]
    trial_queue: list[str]
    trials: list[Trial]
    kept_diffs: list[str]
    mechanisms: list[MechanismCheck]
    fork_at: ForkStep | None
    seed_session: str | None
    llm_usage: LlmUsage
    model_trials: list[ModelTrial]
    search_clock: list[float]
    calls_done: int
    status: SessionStatus
    stop_reason: str | None
    error: str | None
