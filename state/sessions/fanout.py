"""What the loop sends to each parallel trial (LangGraph `Send` payload of the `trial` node)."""

from pathlib import Path

from state.base import Model
from state.config.target import TargetConfig, TrialHost
from state.measurement.decision import LaunchNoise
from state.sessions.loop import Approval, Proposal


class TrialTask(Model):
    """One candidate to try on one host; everything the trial needs, nothing shared."""

    session_id: str
    """The session (branch names, file folders)."""
    iteration: int
    """Loop iteration."""
    host: TrialHost
    """Where to try it."""
    attempt: int = 1
    """1 for the first try; 2 when retried after another host failed."""
    proposal: Proposal
    """The candidate."""
    target: TargetConfig
    """The target (launch, measurement and decision settings)."""
    argv: list[str]
    """The session's launch command before the candidate (accepted launch fixes included)."""
    kept_diffs: list[str]
    """The session's accepted patches, applied in order on the host's branch before its baseline."""
    python: str
    """The interpreter for `{python}` on a local host (an SSH host uses its own `python`)."""
    local_dir: Path
    """Where a local host's server logs go (an SSH host's go under its home's ~/.perfloop)."""
    noise: LaunchNoise | None = None
    """Launch-to-launch noise the session measured (None: the target's default)."""
    schedule_gate: bool = False
    """The session's `LoopOptions.schedule_gate`: timing texts whose schedule follows the speed
    are not compared text by text on the host (the winner is gated again on the session's host)."""


class BatchApproval(Approval):
    """The answer to a batch of parallel candidates, asked once before any is tried (an
    `Approval` that may name the ones to try)."""

    playbooks: list[str] | None = None
    """The candidates approved for trial (None: every one)."""
