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

A crash in the middle of a batch. How LangGraph (1.2) keeps a half-done super-step: each task has a
deterministic id (from the checkpoint, step, node and the `Send`'s position), so the tasks prepared
again on resume have the ids they had; when a task finishes, its writes are saved at once with
`put_writes(config, writes, task_id)` against the checkpoint the step started from (the
checkpointer's `writes` / `checkpoint_writes` table), and that checkpoint's tuple carries them as
`pending_writes` (`task_id, channel, value`). On resume a task with an output write counts as
finished (`langgraph/pregel/_task_status.py`: interrupts, errors and resume answers are control
writes and do not count); its writes are applied again and it is not run, while the others run from
their first line. The public view of this is `graph.get_state(config).tasks`: a task that finished
has a `result` (at least `{}`), one that did not has `None`. So each recorded call has `task_id`
(`ToolCallRecord`; a trial's door branch is made with `runtime.execution_info.task_id`, the main
sequence records none), and on resume `Sessions.finished_tasks` names the finished tasks of the
checkpoint's next step and `SessionStore.supersede_after(session, calls_done, finished)` marks
superseded only the calls after `calls_done` whose task is not among them: the finished trials'
calls stay the recording of what they did, the killed trials' calls are superseded, and their re-run
is recorded after them; the replay then matches each branch against its current calls. A killed
trial's host is tidied by its re-run: `server.launch` stops the server the killed attempt left (the
host's `server.pid`), and a checkout found on the trial's own branch is first taken back to what was
checked out before it (`repo.abandon_branch`: `@{-1}`, the branch and its commits deleted,
uncommitted work carried along, or a one-line refusal when a switch would overwrite it), so the
baseline is never measured on a killed attempt's candidate commit.
`tests/e2e/test_parallel_resume.py` kills a session (SIGKILL, on SQLite and on Postgres) when host
a's trial has finished while host b's launch waits on a gate file, resumes it and checks the replay.
"""

from __future__ import annotations

import time
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, door_of, step, transition
from agent.decision.arms.measuring import machine_drift, outputs_problem, unlike
from agent.decision.stats.levels import level_looks, with_levels
from agent.decision.stats.rule import arm_of, look
from agent.hostrun import HostRun
from agent.proposer.briefing.feedback import divergence
from agent.steps.fanout import settle
from state.measurement.decision import LaunchNoise
from state.measurement.measure import Measurement
from state.measurement.trials import Trial
from state.proposers.llm_tools import LogArgs
from state.sessions.fanout import TrialTask
from state.sessions.loop import Approval, LoopState
from state.sessions.updates import LoopUpdate
from tools.errors import ToolError, first_line
from tools.hosts.ssh_config import SSHError
from tools.llm import code


class TrialRun(HostRun):
    """One trial in progress: what it has started, so that it can always be tidied."""

    def run(self) -> tuple[Measurement, Measurement]:
        """Baseline and candidate measured on this host."""
        t = self.task
        self.prepare()
        reference = self.measured("baseline", t.argv)
        self.phase, self.log = "candidate", None  # a patch that fails to apply has no log of its own
        p = t.proposal
        if p.launch_argv is None:
            self.commit(p.diff, f"perfloop: {p.title}", f"candidate {p.source}")
        return reference, self.measured("candidate", p.launch_argv or t.argv)

    def log_tail(self) -> list[str]:
        """The tail of the crashed candidate's server log, read on its host, as a feedback line
        for a model-written candidate ([] for a playbook's, or without a log)."""
        if self.task.proposal.origin is None or self.phase != "candidate" or self.log is None:
            return []
        try:
            result = self.door.call(code.log_tail, LogArgs(path=self.log))
        except ToolError:
            return []
        return ["server log tail:\n" + result.text] if result.ok else []


def verdict(task: TrialTask, ref: Measurement, cand: Measurement) -> dict:
    """The rule on one host's two arms (one look at the last look's level, pure); under the
    tolerance gate the timing outputs may differ (the winner is gated again on the session's host)."""
    exact = task.target.correctness.policy == "exact"
    problem = outputs_problem(ref, cand, exact, task.schedule_gate) or unlike(ref, cand)
    before, after = ref.tpot_ms.median, cand.tpot_ms.median
    arms = {"tpot_ms_before": before, "tpot_ms_after": after}
    if problem is not None:
        told = []
        if task.proposal.origin is not None and ref.outputs != cand.outputs:  # for the model's next round
            told = divergence(task.target.measure.prompts, ref.outputs, cand.outputs)
        return arms | {"verdict": "rejected", "reason": problem, "feedback": told}
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
            "feedback": [] if host_failed or run is None else run.log_tail(),
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
    update |= {"decisions": plan.decisions, "model_trials": plan.model_trials, "candidates": []}
    if plan.winner is None:
        return Command(update=update, goto="propose")
    update |= {
        "proposal": plan.winner,
        "approval": Approval(approved=True, by="auto", reason="best parallel trial"),
    }
    return Command(update=update, goto="cleanup")
