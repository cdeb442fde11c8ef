"""Cross-host arms' reference host (`[decide] reference_host`, agent/decision/arms/crosshost.py): that
host's checkout with the two trees on a session branch (a `HostRun`, agent/hostrun.py, what
parallel trials use: the session's accepted patches, the candidate committed, the commit before it
checked out as a reference copy `trials/<host>/reference`), one server at a time there, each launch
measured by that host's client, its outputs checked against its own first reference launch, and
the host given back as found (servers stopped, copy removed, commits reverted, branch left)."""

from __future__ import annotations

from pathlib import Path

from langgraph.runtime import Runtime

from agent.context import LoopContext, door_of, need
from agent.decision.arms.arms import reference_host
from agent.decision.arms.measuring import (
    annotate,
    budget,
    outputs_problem,
    texts_compared,
    unlike,
    warmup_requests,
)
from agent.decision.stats.crossover import Arm
from agent.hostrun import HostRun
from agent.serving import measure_args
from state.door.calls import PidFileArgs, RepoArgs
from state.engines.workspace import ReferenceCopyArgs, RemoveCopyArgs
from state.measurement.measure import Measurement
from state.sessions.fanout import TrialTask
from state.sessions.loop import LoopState
from tools import bench, server
from tools.errors import ToolError
from tools.workspace import reference, repo


class ReferenceHost:
    """The reference host's side: its checkout with the two trees, one server at a time."""

    def __init__(self, state: LoopState, runtime: Runtime[LoopContext], label: str) -> None:
        self.state, self.label, self.th = state, label, reference_host(state)
        measure = state.target.measure.model_copy(update={"repeats": budget(state)})
        task = TrialTask(
            session_id=state.session_id,
            iteration=state.iteration,
            host=self.th,
            proposal=need(state.proposal, "proposal"),
            target=state.target.model_copy(update={"measure": measure}),
            argv=state.kept_argv,
            kept_diffs=state.kept_diffs,
            python=state.options.python,
            local_dir=state.options.session_dir,
            schedule_gate=state.options.schedule_gate,
        )
        self.run = HostRun(
            task, door_of(runtime).branch(f"measure@{self.th.name}", self.th.host), "crosshost"
        )
        self.copy: Path | None = None
        self.trees: dict[Arm, tuple[Path, list[str]]] = {}
        self.first_reference: Measurement | None = None

    def tidy_before(self) -> None:
        """What a killed attempt may have left: its servers, the reference copy (the branch is
        abandoned by `HostRun.prepare`)."""
        run, grace = self.run, self.state.target.launch.stop_grace_s
        run.dir = run.files()
        for pid, where in (("server.pid", run.repo), ("reference.pid", run.dir / "reference")):
            run.door.call(
                server.stop_recorded, PidFileArgs(pid_file=run.dir / pid, repo=where, grace_s=grace)
            )
        run.door.call(
            reference.remove_reference_copy, RemoveCopyArgs(repo=run.repo, dest=run.dir / "reference")
        )

    def prepare(self) -> None:
        """The two trees: the checkout on the session branch with the candidate committed, and the
        commit before it as a copy beside it (a launch-option fix: the checkout, two commands)."""
        self.tidy_before()
        run, state = self.run, self.state
        run.prepare()
        if state.pending_commit is None:  # a launch-option fix
            self.trees = {"reference": (run.repo, state.kept_argv), "candidate": (run.repo, state.argv)}
            return
        parent = run.door.call(repo.snapshot, RepoArgs(repo=run.repo)).head_sha
        p = need(state.proposal, "proposal")
        edit = state.approval.diff if state.edited and state.approval is not None else None
        run.commit(edit if edit is not None else p.diff, f"perfloop: {p.title}", f"candidate {p.source}")
        self.copy = run.dir / "reference"
        run.door.call(
            reference.reference_copy, ReferenceCopyArgs(repo=run.repo, dest=self.copy, commit=parent)
        )
        self.trees = {"reference": (self.copy, state.kept_argv), "candidate": (run.repo, state.argv)}

    def launch_measured(self, arm: Arm, number: int, i: int) -> Measurement:
        """Launch `arm`'s tree as launch `number`, measure it like a sequential reference (warm-ups
        first, then `budget` requests per prompt), stop it."""
        run, (where, argv) = self.run, self.trees[arm]
        name = f"{self.label}-{arm}-{i}"
        pid = "reference.pid" if where == self.copy else "server.pid"
        handle = run.launch(where, argv, f"server-{number}-{arm}", number, pid)
        try:
            args = measure_args(run.task.target, handle, name, run.python, where)
            m = run.door.call(bench.measure, args).measurement
            snap = run.door.call(repo.snapshot, RepoArgs(repo=where))
        finally:
            run.stop()
        cfg, w = run.task.target.measure, run.task.target.workload
        warmups = cfg.warmup_requests if w is None else warmup_requests(w)
        plain = self.state.model_copy(update={"instrumentation": None})  # no dormant hook there
        return annotate(m, snap, plain, False, warmups)

    def problem(self, arm: Arm, m: Measurement, exact: bool) -> str | None:
        """The outputs of a launch here against this host's first reference launch."""
        if arm == "reference" and self.first_reference is None:
            self.first_reference = m
            return None
        first = need(self.first_reference, "the reference host's reference launch")
        if arm == "reference":
            same = m.outputs == first.outputs or not texts_compared(first, self.state.options.schedule_gate)
            return None if same else "its reference server's outputs differ from its first"
        return outputs_problem(first, m, exact, self.state.options.schedule_gate) or unlike(first, m)

    def tidy(self) -> str | None:
        """Stop its server, remove the copy, revert the commits, leave the branch; what failed."""
        run = self.run
        try:
            run.stop()
            if self.copy is not None:
                run.door.call(reference.remove_reference_copy, RemoveCopyArgs(repo=run.repo, dest=self.copy))
        except ToolError as exc:
            left = run.tidy()
            return f"{exc}" + (f"; {left}" if left else "")
        return run.tidy()
