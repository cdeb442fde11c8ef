"""Cross-host arms (`[decide] arms = "cross-host"`, or `auto` where two servers do not fit and
`reference_host` names one of the target's `[[hosts]]`): a crossover of the session's host and the
reference host, both running at the same time, swapping trees every round (round 1: the
candidate here, the server `relaunch` started, and the reference there; round 2 the other way
round; ...), so that the hosts' own speed difference cancels (agent/decision/stats/crossover.py).

Here the trees are the alternating arms' (the candidate in the target's checkout, the reference
from the worktree of the candidate's parent, `interleave.reference_tree`, pid file
`reference.pid`). On the reference host (agent/decision/arms/referencehost.py) a `HostRun` (agent/hostrun.py, what parallel trials use)
puts that host's checkout on a session branch with the session's accepted patches, commits the
candidate's patch on it (the candidate tree), and checks the commit before it out as a reference
copy beside it (`trials/<host>/reference`, pid file `reference.pid` there; the candidate's is
`server.pid`); a launch-option fix runs both trees from the checkout with the two launch commands.
One server at a time on each host; each launch measured by its own host's client (the bench tools
run on that host) with its warm-ups discarded and reduced to one location. The reference host's
calls go through its own door branch (`measure@HOST`) in a second thread, so a replay matches each
host's calls in their own order.

The candidate's correctness set is checked on its first launch before the reference host starts
(a wrong candidate costs no launch there), and its timing outputs on every launch: here against
the reference measurement's, there against that host's first reference launch. The reference
host is tidied first (a killed attempt's servers, copy and branch) and before the step returns,
whatever happened: its servers stopped, the copy removed, the commits reverted, the branch left.
Each tree's replicate launches are kept as A/A samples of their own host (`noise.target_key`
with that host), and the baseline plans the rounds from both hosts' (`both_hosts_noise`).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.decision.arms.aalaunches import replicate_samples
from agent.decision.arms.alternating import location, measure_launch, merge_all
from agent.decision.arms.arms import reference_host
from agent.decision.arms.interleave import launch_beside, reference_tree, role_of, stop_reference
from agent.decision.arms.measuring import (
    judgement_of,
    outputs_problem,
    texts_compared,
    unlike,
)
from agent.decision.arms.referencehost import ReferenceHost
from agent.decision.gate import outputs
from agent.decision.judging import JudgedCandidate
from agent.decision.stats.crossover import (
    Arm,
    crossover_look,
    first_look,
    looks_of,
    other,
    rounds_planned,
    session_arm,
)
from agent.decision.stats.noise import across_hosts, launch_noise, target_key
from agent.decision.stats.replicates import prior_of
from agent.serving import start_server
from state.config.target import TrialHost
from state.door.calls import ServerArgs
from state.engines.process import ServerHandle
from state.measurement.aa import AARecordArgs
from state.measurement.arms import LaunchLocation
from state.measurement.decision import LaunchNoise, Look
from state.measurement.measure import Measurement
from state.measurement.tolerance import ToleranceResult
from state.sessions.loop import LoopState
from tools import progress, server
from tools.errors import ToolError
from tools.store import aa


def both_hosts_noise(state: LoopState, runtime: Runtime[LoopContext], noise: LaunchNoise) -> LaunchNoise:
    """The launch noise cross-host arms plan with and take as the A/A prior, fixed on the baseline:
    both hosts' stored A/A launches (they are of one kind), read through the door; `noise` (the
    session host's) for sessions recorded before (`LoopOptions.reference_host_aa`)."""
    if not (state.options.aa_evidence and state.options.reference_host_aa):
        return noise
    keys = (target_key(state.target), target_key(state.target, reference_host(state)))
    read = {k: call(runtime, aa.record, AARecordArgs(target_key=k)).samples for k in keys}
    return across_hosts(read, state.target.decide)


def session_host(state: LoopState) -> str:
    """The session's own host as a per-launch row names it: `target_key`'s host part (pure)."""
    return state.target.host.url if state.target.host.kind == "ssh" else "local"


ARMS: tuple[Arm, Arm] = ("reference", "candidate")


class Launches:
    """The launches so far: per (host, arm) locations and measurements, in launch order."""

    def __init__(self, here: str, there: str) -> None:
        self.here, self.there = here, there
        self.rows: list[LaunchLocation] = []
        self.ms: dict[tuple[str, Arm], list[Measurement]] = {}

    def add(self, state: LoopState, host: str, arm: Arm, number: int, m: Measurement) -> None:
        self.ms.setdefault((host, arm), []).append(m)
        self.rows.append(
            LaunchLocation(arm=arm, launch_number=number, location_log=location(state, m), host=host)
        )

    def cells(self) -> dict[tuple[str, Arm], list[float]]:
        out: dict[tuple[str, Arm], list[float]] = {}
        for p in self.rows:
            out.setdefault((need(p.host, "host"), p.arm), []).append(p.location_log)
        return out

    def arm(self, arm: Arm) -> Measurement:
        """The session host's launches of `arm` as one measurement (the report's arms)."""
        return merge_all(self.ms[(self.here, arm)])

    def keep(self, state: LoopState, runtime: Runtime[LoopContext], th: TrialHost) -> None:
        """Each host's replicate launches as A/A samples of that host, in one `aa.record` call."""
        if not state.options.aa_evidence:
            return
        samples = []
        for host, key in ((self.here, None), (self.there, target_key(state.target, th))):
            rows = [p for p in self.rows if p.host == host]
            arms: dict[Arm, list[Measurement]] = {a: self.ms.get((host, a), []) for a in ARMS}
            samples += replicate_samples(state, rows, arms, key)
        if samples:
            call(runtime, aa.record, AARecordArgs(target_key=samples[0].target_key, more=samples))


def judge_cross_host(state: LoopState, runtime: Runtime[LoopContext], label: str) -> JudgedCandidate:
    """Judge the running candidate in a crossover with the reference host; the reference host is
    put back before this returns (a failure to is the step's error)."""
    n = len(need(state.reference, "reference measurement").outputs)
    running = start_server(state, runtime, state.instrumentation is not None)  # a resumed step: relaunched
    count = 0 if running == state.server else 1
    state = state.model_copy(update={"server": running})
    problem, tolerance, note = outputs.check(
        state, runtime, n
    )  # the correctness set, before any other launch
    if problem is not None:
        m = measure_launch(state, runtime, running, f"{label}-candidate-1", state.target.repo)
        return JudgedCandidate(
            m, problem=problem, tolerance=tolerance, launches_beside=count, server=running, gate_note=note
        )
    there = ReferenceHost(state, runtime, label)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"reference-host-{there.th.name}")
    try:
        judged = Crossover(state, runtime, label, there, pool, count).judge(tolerance)
    finally:
        pool.shutdown(wait=True)
        try:
            stop_reference(state, runtime)
        finally:
            left = there.tidy()
    if left is not None:
        raise ToolError(f"reference host {there.th.name} not put back: {left}")
    return dataclasses.replace(judged, gate_note=note)


class Crossover:
    """The rounds, both hosts at once: this host in the calling thread, the reference host in
    `pool`'s thread through its own door branch."""

    def __init__(
        self,
        state: LoopState,
        runtime: Runtime[LoopContext],
        label: str,
        there: ReferenceHost,
        pool: ThreadPoolExecutor,
        count: int,
    ) -> None:
        self.state, self.runtime, self.label, self.there, self.pool = state, runtime, label, there, pool
        self.count, self.base = count, state.launches  # new launches so far (both hosts); before
        self.running = need(state.server, "candidate server")
        self.here = session_host(state)
        self.launches = Launches(self.here, there.th.name)

    def launch_here(self, r: int, arm: Arm, where: Path, argv: list[str]) -> None:
        """One server at a time here: the last one stopped, round r's started (round 1's is the
        candidate `relaunch` started)."""
        state, runtime = self.state, self.runtime
        if r == 1:
            return
        call(runtime, server.stop, ServerArgs(server=self.running, grace_s=state.target.launch.stop_grace_s))
        if arm == "reference":
            number = self.base + self.count + 1
            self.running = launch_beside(state, runtime, where, argv, number, role_of(state, where))
        else:
            at = state.model_copy(update={"server": None, "launches": self.base + self.count})
            self.running = start_server(at, runtime, state.instrumentation is not None)
        self.count += 1

    def round(self, r: int, rounds: int, where: Path, argv: list[str]) -> tuple[Measurement, Measurement]:
        """Round r: this host's arm here and the other arm on the reference host, at the same time."""
        state, there, arm = self.state, self.there, session_arm(r)
        x_number = self.base + self.count + (1 if r == 1 else 2)
        i = len(self.launches.ms.get((self.here, arm), [])) + 1
        j = len(self.launches.ms.get((there.th.name, other(arm)), [])) + 1
        pending: Future[Measurement] = self.pool.submit(there.launch_measured, other(arm), x_number, j)
        try:
            self.launch_here(r, arm, where, argv)
            with progress.within(f"round {r}/{rounds}: {arm} here, {other(arm)} on {there.th.name}"):
                tree = where if arm == "reference" else state.target.repo
                m = measure_launch(state, self.runtime, self.running, f"{self.label}-{arm}-{i}", tree)
        finally:
            wait([pending])
        mx = pending.result()
        self.count += 1
        self.launches.add(state, self.here, arm, self.running.launch_number, m)
        self.launches.add(state, there.th.name, other(arm), x_number, mx)
        return m, mx

    def problem(self, r: int, m: Measurement, mx: Measurement, exact: bool) -> str | None:
        """Round r's outputs: here against the reference measurement's, there against that host's
        first reference launch."""
        ref0, arm, there = need(self.state.reference, "reference measurement"), session_arm(r), self.there
        i = len(self.launches.ms[(self.here, arm)])
        problem = None
        sg = self.state.options.schedule_gate
        if arm == "candidate":
            problem = outputs_problem(ref0, m, exact, sg) or (unlike(ref0, m) if r == 1 else None)
        elif m.outputs != ref0.outputs and texts_compared(ref0, sg):
            problem = "the reference server's outputs differ from the reference measurement's"
        if problem is not None:
            return f"on {arm} launch {i}: {problem}"
        px = there.problem(other(arm), mx, exact)
        j = len(self.launches.ms[(there.th.name, other(arm))])
        return None if px is None else f"on {other(arm)} launch {j} on host {there.th.name}: {px}"

    def judge(self, tolerance: ToleranceResult | None) -> JudgedCandidate:
        """Prepare the reference host, then the rounds with a look after each once there are df."""
        state, runtime, cfg = self.state, self.runtime, self.state.target.decide
        noise = state.launch_noise or launch_noise([], cfg)
        rounds, prior = rounds_planned(noise, cfg), prior_of(noise)
        first, of = first_look(prior[1]), looks_of(rounds, prior[1])
        exact = not outputs.scored(state)
        self.pool.submit(self.there.prepare).result()
        where, argv = reference_tree(state, runtime)
        looks: list[Look] = []
        replicates = noise
        for r in range(1, rounds + 1):
            m, mx = self.round(r, rounds, where, argv)
            problem = self.problem(r, m, mx, exact)
            if problem is not None:
                self.launches.keep(state, runtime, self.there.th)
                cand = self.launches.ms.get((self.here, "candidate"), [m])
                return JudgedCandidate(
                    merge_all(cand), problem=problem, tolerance=tolerance, launches_beside=self.count,
                    server=self.running if session_arm(r) == "candidate" else None,
                )  # fmt: skip
            if r >= first:
                lk, replicates = crossover_look(self.launches.cells(), cfg, r - first + 1, of, prior)
                looks.append(lk)
                if lk.verdict != "undecided":
                    break
        self.launches.keep(state, runtime, self.there.th)
        kept: ServerHandle | None = self.running
        if session_arm(r) == "reference":  # the candidate's server runs on only when it may be profiled next
            grace = state.target.launch.stop_grace_s
            call(runtime, server.stop, ServerArgs(server=self.running, grace_s=grace))
            kept = None
            if looks[-1].verdict == "accepted":
                at = state.model_copy(update={"server": None, "launches": self.base + self.count})
                kept, self.count = (
                    start_server(at, runtime, state.instrumentation is not None),
                    self.count + 1,
                )
        both = (self.launches.arm("reference"), self.launches.arm("candidate"))
        judgement = judgement_of(
            looks[-1].verdict, looks, replicates, cfg, both, len(both[0].outputs),
            arms="cross-host", per_launch=self.launches.rows, workload=state.target.workload,
        )  # fmt: skip
        return JudgedCandidate(
            both[1], judgement, tolerance=tolerance, launches_beside=self.count, server=kept
        )
