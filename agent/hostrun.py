"""A run on one of the target's `[[hosts]]` (a parallel trial, agent/steps/trial.py; the reference
host of cross-host arms, agent/decision/arms/crosshost.py): that host's own checkout put on a session
branch with the session's accepted patches committed, servers launched from it with their pid file
under the session's folder there (`trials/<host>/`), and everything given back as it was found:
the server stopped, the commits reverted, the branch left. Every call goes through the door branch
the run was given (node `NAME@HOST`, that host's executor), so a replay matches it in its own order.

May import: `agent.serving`, `agent.context`, `tools`, `state`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from agent.serving import launch_args, measure_args
from state.door.calls import (
    ApplyArgs,
    BranchArgs,
    CommitArgs,
    LeaveBranchArgs,
    PathArgs,
    RepoArgs,
    ServerArgs,
)
from state.engines.process import ServerHandle
from state.engines.workspace import CommitInfo, WorkspaceSnapshot
from state.measurement.measure import Measurement
from state.sessions.fanout import TrialTask
from tools import bench, server
from tools.door import Door
from tools.errors import ToolError, first_line
from tools.hosts import info
from tools.workspace import repo
from tools.workspace.commands import SESSION_BRANCH_PREFIX


class HostRun:
    """One run on a `[[hosts]]` host in progress: what it has started, so that it can always be
    tidied."""

    def __init__(self, task: TrialTask, door: Door, role: str = "trial") -> None:
        self.task, self.door = task, door
        self.repo = task.host.repo
        host = task.host.host
        self.python = host.python if host.kind == "ssh" else task.python
        self.branch = f"{SESSION_BRANCH_PREFIX}{task.session_id}-{role}{task.iteration}-{task.host.name}"
        self.phase: Literal["host", "candidate"] = "host"
        self.start: WorkspaceSnapshot | None = None
        self.commits: list[CommitInfo] = []
        self.server: ServerHandle | None = None
        self.launches = 0
        self.dir = Path()
        self.log: Path | None = None
        """The log of the server launched last (a crashed candidate's traceback)."""

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

    def launch(
        self, where: Path, argv: list[str], name: str, number: int, pid: str = "server.pid"
    ) -> ServerHandle:
        """Start a server on the tree at `where` (this host's checkout, or a copy beside it) as launch
        `number`, its log `logs/NAME.log` and its pid file `pid` in this run's folder."""
        t = self.task
        fingerprint = repo.tree_fingerprint(self.door.call(repo.snapshot, RepoArgs(repo=where)))
        self.log = self.dir / "logs" / f"{name}.log"
        args = launch_args(
            t.target, where, argv, self.python, self.log, fingerprint, number, self.dir / pid, env=t.host.env
        )
        self.server = self.door.call(server.launch, args)
        return self.server

    def measured(self, label: str, argv: list[str]) -> Measurement:
        """Launch the tree as it is with `argv`, measure it, stop the server."""
        t = self.task
        self.launches += 1
        name = f"iteration-{t.iteration}-{t.proposal.source}-{label}"
        handle = self.launch(self.repo, argv, name, self.launches)
        measure = measure_args(t.target, handle, f"trial-{name}", self.python, self.repo)
        m = self.door.call(bench.measure, measure).measurement
        self.stop()
        return m

    def stop(self) -> None:
        if self.server is not None:
            grace = self.task.target.launch.stop_grace_s
            self.door.call(server.stop, ServerArgs(server=self.server, grace_s=grace))
            self.server = None

    def prepare(self) -> None:
        """The host's checkout on this run's branch with the session's accepted patches committed
        (a killed attempt's branch abandoned first): the tree the candidate is measured against."""
        self.dir = self.files()
        self.start = self.door.call(repo.snapshot, RepoArgs(repo=self.repo))
        if self.start.branch == self.branch:  # a killed attempt of this trial: start from before it
            self.start = self.door.call(repo.abandon_branch, BranchArgs(repo=self.repo, name=self.branch))
        self.door.call(repo.ensure_branch, BranchArgs(repo=self.repo, name=self.branch))
        for i, diff in enumerate(self.task.kept_diffs, 1):
            self.commit(diff, f"perfloop: accepted patch {i} of the session", f"kept-{i}")

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
