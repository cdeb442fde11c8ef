"""What a node of the loop returns to change the state: `LoopUpdate`, the fields of `LoopState` by
name, any subset of them (a test keeps the two equal, so a misspelt key fails the type check).

The list fields LangGraph appends to (`profiles`, `decisions`, `transitions`, `trials`,
`mechanisms`, `model_trials`) take the items to add; every other field takes its new value.
"""

from typing import TypedDict

from state.config.options import LoopOptions
from state.config.target import TargetConfig
from state.engines.limits import LongPrompts
from state.engines.process import ServerHandle
from state.engines.sglang import SglangLayout
from state.engines.workspace import CommitInfo, InstrumentationRecord, WorkspaceSnapshot
from state.measurement.arms import ArmsChoice
from state.measurement.correctness import OutputNoise, OutputsResult
from state.measurement.decision import Judgement, LaunchNoise, MechanismCheck
from state.measurement.measure import Measurement
from state.measurement.numerics import NumericsNoise, NumericsVerdict
from state.measurement.power import Power
from state.measurement.tolerance import ScoreResult, ToleranceResult
from state.measurement.trials import Trial
from state.profiling.diagnosis import Diagnosis
from state.proposers.proposer import LlmUsage, ModelTrial
from state.sessions.chain import ChainCheck
from state.sessions.ids import SessionId
from state.sessions.loop import Approval, Decision, ForkStep, ProfileResult, Proposal, Transition
from state.sessions.session import SessionStatus


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
    output_noise: OutputNoise | None
    gate_note: str | None
    numerics_noise: NumericsNoise | None
    numerics: NumericsVerdict | None
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
    startups: dict[str, float]
    chain_check: ChainCheck | None
    calls_done: int
    status: SessionStatus
    stop_reason: str | None
    error: str | None
