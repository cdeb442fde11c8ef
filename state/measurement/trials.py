"""Candidates tried at the same time on several hosts: one trial's outcome.

A trial measures one candidate patch on one of the target's `[[hosts]]` against that host's own
baseline (own branch, own server); the `join` step of the loop compares the trials of an iteration.
"""

from typing import Literal

from pydantic import Field

from state.base import Model

TrialStatus = Literal["measured", "failed", "host-failed"]
"""measured: both arms measured; failed: the candidate did not apply or its server did not serve;
host-failed: the host itself failed (unreachable, dropped, its own baseline failed)."""


class Trial(Model):
    """One candidate tried on one host."""

    iteration: int
    """Loop iteration it belongs to."""
    playbook: str
    """The candidate's playbook id."""
    host: str
    """The host's `name` in the target's `[[hosts]]`."""
    attempt: int
    """1 for the first try; 2 when retried on another host after its host failed."""
    status: TrialStatus
    """How far it got."""
    verdict: Literal["accepted", "rejected", "regression", "inconclusive", "failed"]
    """The rule's verdict on this host (one look, the target's `[decide]`, default launch noise);
    `failed` unless `status` is `measured`."""
    reason: str
    """One line: why."""
    branch: str | None = None
    """The trial's branch in the host's checkout (deleted again when the trial gives the checkout
    back: its commits reverted, the branch left; kept only when that clean-up failed)."""
    tpot_ms_before: float | None = None
    """The host's baseline median TPOT."""
    tpot_ms_after: float | None = None
    """The candidate's median TPOT on that host."""
    speedup: float | None = None
    """The rule's speedup estimate (reference over candidate)."""
    ci: list[float] | None = None
    """[low, high] of the speedup's interval."""
    feedback: list[str] = Field(default_factory=list)
    """For a model-written candidate: where its outputs diverged from the host's baseline (prompt,
    position, expected vs got), or its crashed server's log tail; what the model's next round is
    told besides the verdict and reason (`settle` makes it a `ModelTrial`)."""
    wall_s: float = 0.0
    """Seconds the trial took on its host, launches included (the clock of the run: a replay
    measures its own, so it stays out of `line()` and the summary)."""

    def line(self) -> str:
        """One line for summaries, e.g. `1 kv-cast on host-a: accepted 3.10x [2.20, 4.40], TPOT ...`."""
        what = f"{self.iteration} {self.playbook} on {self.host}"
        if self.attempt > 1:
            what += f" (retry {self.attempt})"
        if self.speedup is None or self.ci is None:
            return f"{what}: {self.status}, {self.reason}"
        return (
            f"{what}: {self.verdict} {self.speedup:.2f}x [{self.ci[0]:.2f}, {self.ci[1]:.2f}], TPOT "
            f"{self.tpot_ms_before:.1f} -> {self.tpot_ms_after:.1f} ms"
        )
