"""Parallel candidates: the `trial` node (one candidate on one host) and the `join` step.

`propose` sends each candidate to its own host with LangGraph's `Send` when the target lists
`[[hosts]]`; the trials of a batch run at the same time (LangGraph runs the tasks of one super-step
in threads), each through its own branch of the door (node `trial@HOST`, the host's executor), so
a replay matches each host's calls in their own order. A trial puts the host's checkout on its own
branch with the session's accepted patches, launches and measures the host's baseline, applies the
candidate, launches and measures it, then stops its server and gives the checkout back as it found
it. Its outcome, never an exception, goes to `trials`. `join` (agent/steps/fanout.py) sends the next
batch or keeps the best verified candidate, which then goes through cleanup, apply, relaunch,
measure and decide here, on the session's own host.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, door_of, step, transition
from agent.decision.levels import level_looks, with_levels
from agent.decision.measuring import machine_drift, outputs_problem, unlike
from agent.decision.rule import arm_of, look
from agent.serving import launch_args, measure_args
from agent.steps.fanout import settle
from state.calls import (
    ApplyArgs,
    BranchArgs,
    CommitArgs,
    LeaveBranchArgs,
    PathArgs,
    RepoArgs,
    ServerArgs,
)
from state.decision import LaunchNoise
from state.fanout import TrialTask
from state.loop import Approval, LoopState
from state.measure import Measurement
from state.process import ServerHandle
from state.trials import Trial
from state.updates import LoopUpdate
from state.workspace import CommitInfo, WorkspaceSnapshot
from tools import bench, server
from tools.door import Door
from tools.errors import ToolError, first_line
from tools.hosts import info
from tools.hosts.ssh_config import SSHError
from tools.workspace import repo
from tools.workspace.commands import SESSION_BRANCH_PREFIX


class TrialRun:
    """One trial in progress: what it has started, so that it can always be tidied."""

    def __init__(self, task: TrialTask, door: Door) -> None:
        self.task, self.door = task, door
        self.repo = task.host.repo
        host = task.host.host
        self.python = host.python if host.kind == "ssh" else task.python
        self.branch = f"{SESSION_BRANCH_PREFIX}{task.session_id}-trial{task.iteration}-{task.host.name}"
        self.phase: Literal["host", "candidate"] = "host"
        self.start: WorkspaceSnapshot | None = None
        self.commits: list[CommitInfo] = []
        self.server: ServerHandle | None = None
        self.launches = 0
        self.dir = Path()

    def files(self) -> Path:
        """Where this host's server logs and pid file go."""
        h, sub = self.task.host, f"sessions/{self.task.session_id}/trials/{self.task.host.name}"
        if h.host.kind != "ssh":
            return self.task.local_dir / "trials" / h.name
        return self.door.call(info.expand_user, PathArgs(path=Path("~/.perfloop") / sub)).path

    def commit(self, diff: str, subject: str, trailer: str) -> None:
        trailers = {"Perfloop-Session": self.task.session_id, "Perfloop-Trial": trailer}
        args = ApplyArgs(repo=self.repo, diff=diff, subject=subject, trailers=trailers)
        self.commits.append(self.door.call(repo.apply_patch, args))

    def measured(self, label: str, argv: list[str]) -> Measurement:
        """Launch the tree as it is with `argv`, measure it, stop the server."""
        t = self.task
        fingerprint = repo.tree_fingerprint(self.door.call(repo.snapshot, RepoArgs(repo=self.repo)))
        self.launches += 1
        name = f"iteration-{t.iteration}-{t.proposal.source}-{label}"
        args = launch_args(
            t.target,
            self.repo,
            argv,
            self.python,
            self.dir / "logs" / f"{name}.log",
            fingerprint,
            self.launches,
            self.dir / "server.pid",
            env=t.host.env,
        )
        self.server = self.door.call(server.launch, args)
        measure = measure_args(t.target, self.server, f"trial-{name}", self.python, self.repo)
        m = self.door.call(bench.measure, measure).measurement
        self.stop()
        return m

    def stop(self) -> None:
        if self.server is not None:
            grace = self.task.target.launch.stop_grace_s
            self.door.call(server.stop, ServerArgs(server=self.server, grace_s=grace))
            self.server = None

    def run(self) -> tuple[Measurement, Measurement]:
        """Baseline and candidate measured on this host."""
        t = self.task
        self.dir = self.files()
        self.start = self.door.call(repo.snapshot, RepoArgs(repo=self.repo))
        if self.start.branch == self.branch:  # a killed attempt of this trial: start from before it
            self.start = self.door.call(repo.abandon_branch, BranchArgs(repo=self.repo, name=self.branch))
        self.door.call(repo.ensure_branch, BranchArgs(repo=self.repo, name=self.branch))
        for i, diff in enumerate(t.kept_diffs, 1):
            self.commit(diff, f"perfloop: accepted patch {i} of the session", f"kept-{i}")
        reference = self.measured("baseline", t.argv)
        self.phase = "candidate"
        p = t.proposal
        if p.launch_argv is None:
            self.commit(p.diff, f"perfloop: {p.title}", f"candidate {p.source}")
        return reference, self.measured("candidate", p.launch_argv or t.argv)

    def tidy(self) -> str | None:
        """Stop the server, undo the trial's commits, put the checkout back; what failed, if any."""
        try:
            self.stop()
            for c in reversed(self.commits):
                self.door.call(repo.revert_commit, CommitArgs(repo=self.repo, commit=c))
            if self.start is not None:
                back = LeaveBranchArgs(
                    repo=self.repo, name=self.branch, back_to=self.start.branch, head_sha=self.start.head_sha
                )
                self.door.call(repo.leave_branch, back)
        except ToolError as exc:
            return f"left as it was on the host: {first_line(exc)}"
        return None


def verdict(task: TrialTask, ref: Measurement, cand: Measurement) -> dict:
    """The rule on one host's two arms (one look at the last look's level, pure); under the
    tolerance gate the timing outputs may differ (the winner is gated again on the session's host)."""
    exact = task.target.correctness.policy == "exact"
    problem = outputs_problem(ref, cand, exact) or unlike(ref, cand)
    before, after = ref.tpot_ms.median, cand.tpot_ms.median
    arms = {"tpot_ms_before": before, "tpot_ms_after": after}
    if problem is not None:
        return arms | {"verdict": "rejected", "reason": problem}
    cfg, n = task.target.decide, len(task.target.measure.prompts)
    noise = task.noise or LaunchNoise(sigma_log=cfg.default_launch_noise)
    lk = look(
        arm_of(ref, n, task.target.workload),
        arm_of(cand, n, task.target.workload),
        noise,
        cfg,
        cfg.looks,
        machine_drift(ref, cand),
    )
    reason = f"TPOT {before:.1f} -> {after:.1f} ms, {lk.speedup:.2f}x [{lk.ci_low:.2f}, {lk.ci_high:.2f}]"
    others = level_looks(ref, cand, task.target.workload, noise, cfg, cfg.looks, machine_drift(ref, cand))
    v = with_levels("inconclusive" if lk.verdict == "undecided" else lk.verdict, others)
    return arms | {"verdict": v, "reason": reason, "speedup": lk.speedup, "ci": [lk.ci_low, lk.ci_high]}


def trial(state: TrialTask, *, runtime: Runtime[LoopContext]) -> LoopUpdate:
    """Try one candidate on one host (a `Send` target; its state is the task); its outcome goes to
    `trials`."""
    task = state
    t0 = time.monotonic()
    base = {
        "iteration": task.iteration,
        "playbook": task.proposal.source,
        "host": task.host.name,
        "attempt": task.attempt,
    }
    run: TrialRun | None = None
    try:
        ex = runtime.execution_info  # its task id: the calls stay current once the task has finished
        task_id = ex.task_id if ex is not None else None
        run = TrialRun(task, door_of(runtime).branch(f"trial@{task.host.name}", task.host.host, task_id))
        ref, cand = run.run()
        outcome = {"status": "measured", **verdict(task, ref, cand)}
    except ToolError as exc:
        line = first_line(exc)
        host_failed = run is None or run.phase == "host" or isinstance(exc, SSHError)
        status = "host-failed" if host_failed else "failed"
        outcome = {
            "status": status,
            "verdict": "failed",
            "reason": f"{'host failed' if host_failed else 'candidate failed'}: {line}",
        }
    left = run.tidy() if run is not None else None
    if left is not None:
        outcome["reason"] += f"; {left}"
    branch = run.branch if run is not None else None
    return {"trials": [Trial(**base, **outcome, branch=branch, wall_s=time.monotonic() - t0)]}


@step
def join(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["trial", "cleanup", "propose", "abort"]]:
    """After a batch of trials: send the next one, or keep the best verified candidate (applied
    and measured again here, through the usual steps), or none (back to propose)."""
    plan = settle(state)
    update: LoopUpdate = {"trial_queue": plan.queue, "transitions": transition("join", plan.note)}
    if plan.sends:
        return Command(update=update, goto=plan.sends)
    update |= {"decisions": plan.decisions, "candidates": []}
    if plan.winner is None:
        return Command(update=update, goto="propose")
    update |= {
        "proposal": plan.winner,
        "approval": Approval(approved=True, by="auto", reason="best parallel trial"),
    }
    return Command(update=update, goto="cleanup")
