"""Alternating arms (`[decide] arms = "alternating"`, or `auto` where two servers do not fit): the
candidate tree and the reference tree launched in turn on the same host, one server at a time,
each up to k times (k planned from the launch noise and `[decide] keep_gain`,
agent/decision/stats/replicates.py), every launch measured with its warm-ups discarded and reduced to
one location; the effect and its CI come from the launches themselves (a random-effects model).

Rounds alternate their order, C R | R C | C R | ..., so a drift of the host's speed that is linear
in time cancels over each two rounds; the first candidate launch is the one `relaunch` started.
The candidate's timing outputs and its correctness set are checked on that first launch before
any reference is launched; every later launch's timing outputs are checked against the reference
measurement's. A look after each round from the second (Bonferroni over the rounds planned); the
rounds stop at the first look that decides. The reference runs from the same worktree of the
candidate's parent as interleaved arms' (`interleave.reference_tree`, pid file `reference.pid`),
removed before the step returns whatever happened. The candidate's server is left running when
the last launch was the candidate's; when it was the reference's and the candidate is accepted,
the candidate is launched once more (unmeasured) for the next profile. A tree's replicate
launches are kept as A/A samples for later sessions (agent/decision/arms/aalaunches.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.decision.arms import blocks
from agent.decision.arms.aalaunches import keep_replicates
from agent.decision.arms.interleave import launch_beside, reference_tree, role_of, stop_reference
from agent.decision.arms.measuring import (
    annotate,
    budget,
    judgement_of,
    merge,
    outputs_problem,
    texts_compared,
    unlike,
    warmup_requests,
)
from agent.decision.gate import outputs
from agent.decision.judging import JudgedCandidate
from agent.decision.stats.blocks import block_look, first_look, looks_planned
from agent.decision.stats.noise import launch_noise
from agent.decision.stats.replicates import alternating_look, launches_per_arm, prior_of
from agent.decision.stats.rule import arm_location, arm_of
from agent.serving import measure_args, start_server
from state.config.target import MeasureConfig
from state.door.calls import RepoArgs, ServerArgs
from state.engines.process import ServerHandle
from state.measurement.arms import LaunchLocation
from state.measurement.decision import Look
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig
from state.sessions.loop import LoopState
from tools import bench, progress, server
from tools.workspace import repo

Arm = Literal["reference", "candidate"]


def round_order(r: int) -> tuple[Arm, Arm]:
    """Round r's (1-based) launch order: C R, then R C, and so on (pure)."""
    return ("candidate", "reference") if r % 2 else ("reference", "candidate")


def measure_launch(
    state: LoopState, runtime: Runtime[LoopContext], handle: ServerHandle, label: str, where: Path
) -> Measurement:
    """One fresh launch measured like a sequential reference: its warm-ups, then `budget` requests
    per prompt (windows under `[workload]`; paired blocks: `repeats`, a block's precision coming
    from more launches rather than looks at one), annotated with the tree `where` holds."""
    cfg, w = state.target.measure, state.target.workload
    per_launch = (
        cfg.repeats if state.options.paired_blocks else budget(state)
    )  # blocks: more launches, not looks
    update: dict[str, MeasureConfig | WorkloadConfig] = {
        "measure": cfg.model_copy(update={"repeats": per_launch})
    }
    warmups = cfg.warmup_requests if w is None else warmup_requests(w)
    target = state.target.model_copy(update=update)
    args = measure_args(target, handle, label, state.options.python, state.target.repo)
    m = call(runtime, bench.measure, args).measurement
    snap = call(runtime, repo.snapshot, RepoArgs(repo=where))
    return annotate(m, snap, state, handle.instrumented, warmups)


def location(state: LoopState, m: Measurement) -> float:
    """The launch's location (mean over prompts of the median log TPOT, or its windows') (pure)."""
    return arm_location(arm_of(m, len(m.outputs), state.target.workload))


def judge_alternating(state: LoopState, runtime: Runtime[LoopContext], label: str) -> JudgedCandidate:
    """Judge the running candidate against the reference tree launched in turn with it."""
    cfg, ref0 = state.target.decide, need(state.reference, "reference measurement")
    n, exact = len(ref0.outputs), not outputs.scored(state)
    noise = state.launch_noise or launch_noise([], cfg)
    k, prior = launches_per_arm(noise, cfg), prior_of(noise)
    pool = (
        blocks.history(state, runtime, blocks.group_of(state, label)) if state.options.paired_blocks else None
    )
    if pool is not None:  # paired blocks: planned from the pool and the launch cost
        k = blocks.trial_plan(state, pool).blocks
    instrumented, base = state.instrumentation is not None, state.launches
    running = start_server(state, runtime, instrumented)  # a resumed step finds it dead: relaunched
    launched = 0 if running == state.server else 1
    state = state.model_copy(update={"server": running})
    with progress.within(f"candidate launch 1/{k}"):
        c = measure_launch(state, runtime, running, f"{label}-candidate-1", state.target.repo)
    sg = state.options.schedule_gate
    problem, tolerance, note = outputs_problem(ref0, c, exact, sg) or unlike(ref0, c), None, None
    if problem is None:  # the correctness set, before any reference launch
        problem, tolerance, note = outputs.check(state, runtime, n)
    if problem is not None:
        return JudgedCandidate(
            c, problem=problem, tolerance=tolerance, launches_beside=launched, server=running, gate_note=note
        )
    arms: dict[Arm, list[Measurement]] = {"candidate": [c], "reference": []}
    per_launch = [
        LaunchLocation(arm="candidate", launch_number=running.launch_number, location_log=location(state, c))
    ]
    looks: list[Look] = []
    last: Arm = "candidate"
    where, argv = reference_tree(state, runtime)
    grace = state.target.launch.stop_grace_s
    try:
        for r in range(1, k + 1):
            for arm in round_order(r):
                if r == 1 and arm == "candidate":
                    continue  # the launch `relaunch` started, measured above
                call(runtime, server.stop, ServerArgs(server=running, grace_s=grace))
                number = base + launched + 1
                if arm == "reference":
                    running = launch_beside(state, runtime, where, argv, number, role_of(state, where))
                else:
                    at = state.model_copy(update={"server": None, "launches": number - 1})
                    running = start_server(at, runtime, instrumented)
                launched, last, i = launched + 1, arm, len(arms[arm]) + 1
                with progress.within(f"{arm} launch {i}/{k}"):
                    tree = where if arm == "reference" else state.target.repo
                    m = measure_launch(state, runtime, running, f"{label}-{arm}-{i}", tree)
                if arm == "candidate":
                    problem = outputs_problem(ref0, m, exact, sg)
                elif m.outputs != ref0.outputs and texts_compared(ref0, sg):
                    problem = (
                        "the reference server's outputs differ from the reference measurement's: not judged"
                    )
                if problem is not None:
                    keep_replicates(state, runtime, per_launch, arms)
                    return JudgedCandidate(
                        merge_all(arms["candidate"]), problem=f"on {arm} launch {i}: {problem}",
                        tolerance=tolerance, launches_beside=launched,
                        server=running if arm == "candidate" else None,
                    )  # fmt: skip
                arms[arm].append(m)
                per_launch.append(
                    LaunchLocation(arm=arm, launch_number=number, location_log=location(state, m))
                )
            if pool is not None and r >= (first := first_look(pool)):
                ds = blocks.differences(per_launch)
                lk, replicates = block_look(ds, pool, cfg, r - first + 1, looks_planned(pool, k))
                looks.append(lk)
                if lk.verdict != "undecided":
                    break
            elif pool is None and r >= 2:
                ref_locs = [p.location_log for p in per_launch if p.arm == "reference"]
                cand_locs = [p.location_log for p in per_launch if p.arm == "candidate"]
                lk, replicates = alternating_look(ref_locs, cand_locs, cfg, r - 1, k - 1, prior)
                looks.append(lk)
                if lk.verdict != "undecided":
                    break
        keep_replicates(state, runtime, per_launch, arms)
        if pool is not None:
            blocks.keep_blocks(state, runtime, label, per_launch)
        if last == "reference":  # the candidate's server runs on only when it may be profiled next
            call(runtime, server.stop, ServerArgs(server=running, grace_s=grace))
            if looks[-1].verdict == "accepted":
                at = state.model_copy(update={"server": None, "launches": base + launched})
                running, launched = start_server(at, runtime, instrumented), launched + 1
    finally:
        stop_reference(state, runtime)
    both = (merge_all(arms["reference"]), merge_all(arms["candidate"]))
    judgement = judgement_of(
        looks[-1].verdict, looks, replicates, cfg, both, n,
        arms="alternating", per_launch=per_launch, workload=state.target.workload,
    )  # fmt: skip
    kept = running if last == "candidate" or looks[-1].verdict == "accepted" else None
    return JudgedCandidate(
        both[1], judgement, tolerance=tolerance, launches_beside=launched, server=kept, gate_note=note
    )


def merge_all(ms: list[Measurement]) -> Measurement:
    """The launches of one arm as one measurement (requests pooled, for the report) (pure)."""
    out = ms[0]
    for m in ms[1:]:
        out = merge(out, m)
    return out
