"""The graph state of the optimization loop and the values its steps exchange."""

import operator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from state.base import Model
from state.config.options import LoopOptions
from state.config.target import TargetConfig
from state.engines.limits import LongPrompts
from state.engines.process import ServerHandle
from state.engines.sglang import SglangLayout
from state.engines.workspace import CommitInfo, InstrumentationRecord, WorkspaceSnapshot
from state.measurement.arms import ArmsChoice
from state.measurement.correctness import OutputNoise, OutputsResult
from state.measurement.decision import Judgement, LaunchNoise, MechanismCheck, Prediction
from state.measurement.measure import Measurement
from state.measurement.numerics import NumericsNoise, NumericsVerdict
from state.measurement.power import Power
from state.measurement.tolerance import ScoreResult, ToleranceResult
from state.measurement.trials import Trial
from state.profiling.diagnosis import Diagnosis, Evidence
from state.proposers.proposer import LlmOrigin, LlmUsage, ModelTrial
from state.sessions.chain import ChainCheck
from state.sessions.ids import ForkStep, SessionId
from state.sessions.session import SessionStatus


class ProfileResult(Model):
    """One profile taken of the running server."""

    iteration: int
    """Loop iteration it belongs to."""
    method: Literal["patch", "api"]
    """How it was taken."""
    trace_path: Path
    """The torch.profiler Chrome trace (.json.gz)."""
    summary_path: Path | None
    """The key_averages table (patch method only)."""
    trace_sha256: str
    """Hash of the trace file."""
    device: str
    """`cpu` or `cuda`: what the profiler recorded."""
    active_tokens: int
    """Most tokens live in the KV cache during the profiled steps (prompt + completion)."""


class Proposal(Model):
    """A patch proposed from a finding."""

    iteration: int
    """Loop iteration."""
    source: str = Field(alias="playbook")
    """Where the patch comes from: the matched playbook's id, or `llm` / `llm-N` for a model's."""
    title: str
    """One-line title."""
    explanation: str
    """Why this is the bottleneck and what the patch does."""
    diff: str
    """Unified diff against the target repo."""
    files: list[str]
    """Repo-relative files the diff touches (the risk)."""
    expected_gain_share: float
    """Expected fraction of decode time removed."""
    expected_gain_ms: float | None
    """Expected TPOT reduction."""
    evidence: list[Evidence]
    """Ops and numbers behind the finding."""
    launch_argv: list[str] | None = None
    """For a fix by launch options (then `diff` is empty): the launch command to run with."""
    predicted_speedup: float | None = None
    """The finding's predicted speedup of the decode step with this fix alone."""
    paired_with: str | None = None
    """A finding whose fix together with this one is predicted to gain far more."""
    paired_speedup: float | None = None
    """The predicted speedup of both fixes together."""
    binary: bool = False
    """Whether the playbook declares binary hunks in its patch (the patch gate lets them through)."""
    exact: bool = False
    """The playbook or launch knob declares the change exact: the output gate passes only `exact`."""
    proposer: Literal["playbook", "llm"] = "playbook"
    """Who wrote the patch: a playbook's stored diff, or a model."""
    origin: LlmOrigin | None = None
    """For a model-written patch: the model, its rationale and what it cost."""


class Approval(Model):
    """A human's or the auto-approver's answer to a proposal."""

    approved: bool
    """Whether to apply it."""
    by: Literal["auto", "human"]
    """Who answered."""
    reason: str | None = None
    """Why it was rejected (or a note)."""
    diff: str | None = None
    """A human-edited patch to apply instead of the proposal's (validated before resuming)."""


class Decision(Model):
    """The verdict on one proposal."""

    iteration: int
    """Loop iteration."""
    source: str = Field(alias="playbook")
    """The proposal's `source`: a playbook id, or `llm` / `llm-N` for a model's patch."""
    verdict: Literal["accepted", "rejected", "regression", "inconclusive", "failed"]
    """accepted: kept; rejected: by a human, or by measurement (outputs, or no gain worth keeping);
    regression: measurably slower; inconclusive: the looks were spent undecided; failed: did not apply."""
    reason: str
    """One line: why."""
    tpot_ms_before: float | None = None
    """Reference median TPOT."""
    tpot_ms_after: float | None = None
    """Candidate median TPOT."""
    noise_ms: float | None = None
    """Measured noise the improvement had to exceed."""
    outputs_identical: bool | None = None
    """Whether the candidate's outputs equal the reference's."""
    commit: str | None = None
    """Commit sha on the session branch (accepted patches only)."""
    launch_argv: list[str] | None = None
    """For a fix by launch options: the launch command it ran with (kept when accepted)."""
    predicted_speedup: float | None = None
    """The speedup the diagnosis predicted for this fix, against the measured before / after."""
    edited: bool = False
    """Whether it judged a human's edit (`perfloop approve --patch`), reported as such, not as `source`."""
    judgement: Judgement | None = None
    """The CI rule's evidence: every look, launch noise, both arms (None for the IQR rule)."""
    prediction: Prediction | None = None
    """What the diagnosis predicted the patch changes (accepted patches, CI rule)."""
    tolerance: ToleranceResult | None = None
    """The tolerance gate's result (`[correctness] policy = "tolerance"`), when it scored one."""
    output_gate: str | None = None
    """Why it passed or failed the output gate, in one line (`LoopOptions.schedule_gate` sessions)."""
    numerics: NumericsVerdict | None = None
    """The numerics gate's verdict, with its figures (`policy = "numerics"`), when it judged one."""

    @property
    def label(self) -> str:
        """What was judged: the proposal's source, or the edited patch that replaced it."""
        return edited_label(self.source) if self.edited else self.source


def edited_label(playbook: str) -> str:
    """How an edited patch is named in summaries (pure)."""
    return f"human-edited patch (replacing {playbook})"


class Transition(Model):
    """A node that ran, for `perfloop show`."""

    node: str
    """Graph node."""
    at: datetime
    """When it finished."""
    note: str
    """One line: what it did."""


class LoopState(Model):
    """The state checkpointed at every transition of the loop."""

    session_id: SessionId
    """Session id (= LangGraph thread id)."""
    target: TargetConfig
    """The target being optimized."""
    options: LoopOptions
    """Session options."""
    iteration: int = 1
    """Current profile/diagnose round."""
    start: WorkspaceSnapshot | None = None
    """The repo as the session found it (the user's uncommitted work included)."""
    branch: str | None = None
    """Session branch `perfloop/<session>`."""
    checkout: str | None = None
    """Where the ended session gave the checkout back (the branch or short commit it was found on)."""
    sglang: SglangLayout | None = None
    """For `kind = "sglang"`: where the package lies in the repo and its release."""
    instrumentation: InstrumentationRecord | None = None
    """Profiler instrumentation currently in the tree, if any."""
    server: ServerHandle | None = None
    """The running server, if any."""
    launches: int = 0
    """Server launches so far."""
    baseline: Measurement | None = None
    """First measurement of the session."""
    reference: Measurement | None = None
    """Measurement of the best accepted state so far (starts as the baseline)."""
    candidate_measurement: Measurement | None = Field(default=None, alias="candidate")
    """Measurement of the current candidate (not to be confused with `candidates`, the proposals)."""
    correctness: OutputsResult | None = None
    """The reference's outputs on the session's correctness set (CI-rule sessions, exact gate)."""
    long_prompts: LongPrompts | None = None
    """The correctness set's long prompts and the limit they reach, fixed on the baseline (or None)."""
    tolerance_reference: ScoreResult | None = None
    """Tolerance gate: the baseline's greedy continuations of the correctness set, scored by it."""
    tolerance: ToleranceResult | None = None
    """Tolerance gate: the current candidate's result (set by `measure`)."""
    output_noise: OutputNoise | None = None
    """How the baseline's own outputs moved with the schedule (A/A on outputs)."""
    gate_note: str | None = None
    """The output gate's line on the current candidate: why it passed or failed (set by `measure`)."""
    numerics_noise: NumericsNoise | None = None
    """The engine's own numerics at the baseline, teacher-forced (`policy = "numerics"`)."""
    numerics: NumericsVerdict | None = None
    """The numerics gate's verdict on the current candidate (set by `measure`, kept by `decide`)."""
    launch_noise: LaunchNoise | None = None
    """Launch-to-launch noise of this target on this host (A/A store, read after the baseline)."""
    power: Power | None = None
    """The smallest gain the session could keep, fixed on the baseline (`LoopOptions.power`)."""
    arms: ArmsChoice | None = None
    """`[decide] arms = "auto"` resolved on the baseline server (None: the target names its arms)."""
    judgement: Judgement | None = None
    """The CI rule's answer on the current candidate (set by `measure`, used by `decide`)."""
    gate_problem: str | None = None
    """Why the current candidate failed the output gate or was measured unlike the reference (set by
    `measure`; then it is rejected without a timing verdict)."""
    profiles: Annotated[list[ProfileResult], operator.add] = Field(default_factory=list)
    """Profiles taken, in order."""
    diagnosis: Diagnosis | None = None
    """Diagnosis of the latest profile."""
    proposal: Proposal | None = None
    """Proposal under consideration."""
    approval: Approval | None = None
    """Answer to the current proposal."""
    pending_commit: CommitInfo | None = None
    """Commit of the candidate patch, until it is accepted or rolled back."""
    launch_argv: list[str] | None = None
    """The session's launch command once a launch-option fix was accepted (None: the target's
    `launch.argv`), kept in the session, not committed to the repo."""
    pending_launch: list[str] | None = None
    """The candidate's launch command while a launch-option fix is measured (then `launch_argv`)."""
    accepted: list[CommitInfo] = Field(default_factory=list)
    """Accepted commits, in order."""
    decisions: Annotated[list[Decision], operator.add] = Field(default_factory=list)
    """Every verdict, in order."""
    transitions: Annotated[list[Transition], operator.add] = Field(default_factory=list)
    """Nodes run, in order."""
    candidates: list[Proposal] = Field(default_factory=list)
    """This iteration's candidates sent to the `[[hosts]]` (parallel trials)."""
    trial_queue: list[str] = Field(default_factory=list)
    """Playbooks of `candidates` not yet sent to a host (`--parallel` caps a batch)."""
    trials: Annotated[list[Trial], operator.add] = Field(default_factory=list)
    """Every parallel trial, per host, in the order they ended."""
    kept_diffs: list[str] = Field(default_factory=list)
    """The diffs of the accepted patches, in order (what a trial host applies before its baseline)."""
    mechanisms: Annotated[list[MechanismCheck], operator.add] = Field(default_factory=list)
    """Predicted vs realized for accepted patches, from the next profile."""
    fork_at: ForkStep | None = None
    """Set in a forked session's initial state: the step to continue at after reconciling."""
    seed_session: str | None = None
    """A fork's: the session whose id seeds the correctness set (the first of its ancestors), so its
    candidates meet its inherited reference's prompts. None: the session's own id."""
    llm_usage: LlmUsage = Field(default_factory=LlmUsage)
    """Model calls and tokens spent in this session (the token budget counts against it)."""
    model_trials: Annotated[list[ModelTrial], operator.add] = Field(default_factory=list)
    """Model-written candidates tried and not kept, with their diffs and trial feedback (`rollback`)."""
    search_clock: list[float] = Field(default_factory=list)
    """`[search] max_minutes`: when each search trial was proposed (epoch seconds, door-read)."""
    startups: dict[str, float] = Field(default_factory=dict)
    """`--proposer chain`: each launch command's start-up to healthy in seconds (keyed by the command
    joined with spaces): what ranking costs a candidate's launches by (agent/proposer/chain.py)."""
    chain_check: ChainCheck | None = None
    """`--proposer chain`: the final tree and launch against the baseline's (agent/steps/chain.py)."""
    calls_done: int = 0
    """Door sequence number when the last completed node finished (later calls were superseded)."""
    status: SessionStatus = "running"
    """Session status."""
    stop_reason: str | None = None
    """Why the loop ended."""
    error: str | None = None
    """One-line error that aborted the loop."""

    @model_validator(mode="before")
    @classmethod
    def _drop_legacy(cls, data: Any) -> Any:
        """States recorded before `tried` was derived carry it (implied by `decisions`). A target
        recorded before `[decide] arms` existed was measured with sequential arms, the only ones then."""
        if not isinstance(data, dict):
            return data
        decide = data.get("target", {}).get("decide") if isinstance(data.get("target"), dict) else None
        if isinstance(decide, dict) and "arms" not in decide:
            data = {**data, "target": {**data["target"], "decide": {**decide, "arms": "sequential"}}}
        return {k: v for k, v in data.items() if k != "tried"}

    @property
    def argv(self) -> list[str]:
        """The launch command the server runs with now: the candidate's, else `kept_argv`."""
        return self.pending_launch or self.kept_argv

    @property
    def kept_argv(self) -> list[str]:
        """The launch command kept so far: the session's (accepted launch-option fixes), the target's."""
        return self.launch_argv or self.target.launch.argv

    @property
    def edited(self) -> bool:
        """Whether the current proposal was answered with a human-edited patch."""
        return self.approval is not None and self.approval.diff is not None

    @property
    def tried(self) -> set[str]:
        """Sources already proposed in this session (each has a decision; never proposed twice)."""
        return {d.source for d in self.decisions}
