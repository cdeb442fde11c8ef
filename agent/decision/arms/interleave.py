"""Interleaved arms (`[decide] arms = "interleaved"`): the reference tree is launched again beside
the candidate and requests alternate between the two servers, so both arms see the same machine
state; the launch noise is then only what differs between two launches measured together (from
interleaved A/A pairs), not the machine's drift between launches.

The reference runs from a linked worktree of the candidate commit's parent that carries the
checkout's uncommitted state (`repo.reference_copy`), or, for a launch-option fix, from the same
tree with the session's previous launch options. Both arms get the same warm-ups, client and
workload. The candidate's correctness set is checked before the reference is launched (a wrong
candidate costs no second launch), and both servers' timing outputs against the reference
measurement's before any timing counts. The reference server is stopped and its copy removed
before the step returns, whatever happened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, host_dir, need
from agent.decision.arms.measuring import (
    annotate,
    judgement_of,
    measure_arm,
    merge,
    outputs_problem,
    texts_compared,
    warmup_requests,
)
from agent.decision.gate import outputs
from agent.decision.judging import JudgedCandidate
from agent.decision.stats.levels import level_looks, with_levels
from agent.decision.stats.noise import pair_noise
from agent.decision.stats.rule import arm_of, look, needs_confirmation, replicated
from agent.serving import launch_args, measure_args
from state.door.calls import MeasureArgs, PairArgs, PidFileArgs, RepoArgs, ServerArgs
from state.engines.process import ServerHandle
from state.engines.workspace import ReferenceCopyArgs, RemoveCopyArgs
from state.measurement.decision import LaunchNoise, Look
from state.measurement.measure import Measurement
from state.sessions.loop import LoopState
from tools import bench, progress, server
from tools.engines.registry import engine
from tools.workspace import reference, repo


def reference_dir(state: LoopState) -> Path:
    """Where the reference copy goes on the target's host (pure)."""
    return host_dir(state) / "reference"


def reference_tree(state: LoopState, runtime: Runtime[LoopContext]) -> tuple[Path, list[str]]:
    """(checkout, launch command) the reference server runs from."""
    argv = state.kept_argv
    commit = state.pending_commit
    if commit is None:  # a launch-option fix: the same tree, the options kept so far
        return state.target.repo, argv
    args = ReferenceCopyArgs(repo=state.target.repo, dest=reference_dir(state), commit=commit.parent_sha)
    call(runtime, reference.reference_copy, args)
    return args.dest, argv


def beside_files(state: LoopState) -> dict[str, Path]:
    """The pid file of each server launched beside the candidate, and where it runs: the reference
    from its copy, the reference from the checkout itself (a launch-option fix, calibration), and
    the candidate's second launch of a confirming pair (pure)."""
    files = {
        "reference.pid": reference_dir(state),
        "reference-tree.pid": state.target.repo,
        "confirm.pid": state.target.repo,
    }
    if precise_side(state):  # (only then: a recording made without it replays the same calls)
        files["precise.pid"] = state.target.repo
    return files


def precise_side(state: LoopState) -> bool:
    """Whether the numerics gate launches the baseline's precision reference beside it (pure)."""
    cfg = state.target.correctness
    return cfg.policy == "numerics" and cfg.precision_reference and bool(engine(state.target.kind).precise)


def role_of(state: LoopState, where: Path) -> str:
    """`reference` from the copy, `reference-tree` from the checkout (pure)."""
    return "reference" if where == reference_dir(state) else "reference-tree"


def launch_beside(
    state: LoopState, runtime: Runtime[LoopContext], where: Path, argv: list[str], number: int, role: str
) -> ServerHandle:
    """Start a server beside the running candidate (its own log and pid file) as launch `number`;
    `role` names its pid file and log (see `beside_files`)."""
    files = host_dir(state)
    snap = call(runtime, repo.snapshot, RepoArgs(repo=where))
    instrumented = bool(state.server and state.server.instrumented)
    args = launch_args(
        state.target,
        where,
        argv,
        state.options.python,
        files / "logs" / f"server-{number}-{role}.log",
        repo.tree_fingerprint(snap),
        number,
        files / f"{role}.pid",
        profile_dir=files / f"profiler-{role}" if instrumented else None,
    )
    return call(runtime, server.launch, args)


def stop_reference(
    state: LoopState, runtime: Runtime[LoopContext], keep: set[str] | frozenset[str] = frozenset()
) -> None:
    """Stop the servers a (possibly killed) attempt launched beside the candidate (but those of
    `keep`'s pid files), and remove the reference copy."""
    grace = state.target.launch.stop_grace_s
    for name, where in beside_files(state).items():
        if name in keep:
            continue
        args = PidFileArgs(pid_file=host_dir(state) / name, repo=where, grace_s=grace)
        call(runtime, server.stop_recorded, args)
    call(
        runtime,
        reference.remove_reference_copy,
        RemoveCopyArgs(repo=state.target.repo, dest=reference_dir(state)),
    )


def pair_args(state: LoopState, handle: ServerHandle, label: str, repeats: int, warmups: int) -> MeasureArgs:
    """One arm's workload: the target's prompts, `repeats` per prompt after `warmups` warm-ups."""
    cfg = state.target.measure.model_copy(update={"repeats": repeats, "warmup_requests": warmups})
    target, python, w = state.target, state.options.python, state.target.workload
    if w is not None:  # warm-up windows with the warm-up requests (a fresh pair of launches)
        w = w.model_copy(update={"warmup_windows": w.warmup_windows if warmups else 0})
    return measure_args(
        target, handle, label, python, target.repo, config=cfg, bench_serving=False, workload=w
    )


Arms = tuple[Measurement, Measurement, list[Look], str | None]
"""(reference arm, candidate arm, looks, why the outputs fail the gate or None)."""


def judge_pair(
    state: LoopState,
    runtime: Runtime[LoopContext],
    label: str,
    servers: tuple[ServerHandle, ServerHandle],
    where: Path,
    noise: LaunchNoise,
) -> Arms:
    """Measure a (reference, candidate) pair of running servers look by look, requests alternating."""
    ref0, cfg = need(state.reference, "reference measurement"), state.target.decide
    n, reps = len(ref0.outputs), state.target.measure.repeats
    ref_m: Measurement | None = None
    cand_m: Measurement | None = None
    looks: list[Look] = []
    for k in range(1, cfg.looks + 1):
        warm = state.target.measure.warmup_requests if k == 1 else 0
        if k == 1 and state.target.workload is not None:
            warm = warmup_requests(state.target.workload)
        with progress.within(f"look {k}/{cfg.looks}"):
            pair = call(
                runtime,
                bench.measure_pair,
                PairArgs(
                    reference=pair_args(state, servers[0], f"{label}-reference", reps, warm),
                    candidate=pair_args(state, servers[1], label, reps, warm),
                ),
            )
        snaps = [call(runtime, repo.snapshot, RepoArgs(repo=p)) for p in (where, state.target.repo)]
        r = annotate(pair.reference, snaps[0], state, servers[0].instrumented, warm)
        c = annotate(pair.candidate, snaps[1], state, servers[1].instrumented, warm)
        ref_m, cand_m = (r, c) if ref_m is None or cand_m is None else (merge(ref_m, r), merge(cand_m, c))
        problem = outputs_problem(ref0, cand_m, not outputs.scored(state), state.options.schedule_gate)
        if (
            problem is None
            and ref_m.outputs != ref0.outputs
            and texts_compared(ref0, state.options.schedule_gate)
        ):
            problem = "the reference server's outputs differ from the reference measurement's: not judged"
        if problem is not None:
            return ref_m, cand_m, looks, problem
        w = state.target.workload
        looks.append(look(arm_of(ref_m, n, w), arm_of(cand_m, n, w), noise, cfg, k))
        if looks[-1].verdict != "undecided":
            break
    return need(ref_m, "reference arm"), need(cand_m, "candidate arm"), looks, None


def confirming_line(lk: Look, confirm_below: float | None) -> str:
    """Why a second pair of launches starts after an accepted look: `confirming 1.43x [1.10, 1.90]
    on a fresh pair: its low end is under confirm_below 2.0` (pure)."""
    return (
        f"confirming {lk.speedup:.2f}x [{lk.ci_low:.2f}, {lk.ci_high:.2f}] on a fresh pair: "
        f"its low end is under confirm_below {confirm_below}"
    )


def judge_interleaved(state: LoopState, runtime: Runtime[LoopContext], label: str) -> JudgedCandidate:
    """Launch the reference beside the running candidate, measure both look by look, judge; an
    acceptance below `confirm_below` is judged again on a fresh pair of launches."""
    cfg, candidate = state.target.decide, need(state.server, "candidate server")
    n = len(need(state.reference, "reference measurement").outputs)
    noise = state.launch_noise if state.launch_noise and state.launch_noise.paired else pair_noise([], cfg)
    problem, tolerance, note = outputs.check(
        state, runtime, n
    )  # a failing candidate costs no reference launch
    if problem is not None:
        m = measure_arm(state, runtime, label, state.target.measure.repeats, warm_up=True)
        return JudgedCandidate(m, problem=problem, tolerance=tolerance, launches_beside=0, gate_note=note)
    where, argv = reference_tree(state, runtime)
    launches = 0
    running: ServerHandle | Literal["unchanged"] | None = "unchanged"
    try:
        ref = launch_beside(state, runtime, where, argv, state.launches + 1, role_of(state, where))
        launches += 1
        ref_m, cand_m, looks, problem = judge_pair(state, runtime, label, (ref, candidate), where, noise)
        if problem is not None:
            return JudgedCandidate(cand_m, problem=problem, tolerance=tolerance, launches_beside=launches)
        w = state.target.workload  # other concurrency levels: a regression at any is one
        others = level_looks(ref_m, cand_m, w, noise, cfg, len(looks))
        verdict, confirmation = with_levels(looks[-1].verdict, others), list[Look]()
        if needs_confirmation(looks[-1], cfg):
            call(runtime, server.stop, ServerArgs(server=ref, grace_s=state.target.launch.stop_grace_s))
            if state.options.confirm_alone:  # two servers at a time: the pair relaunches the candidate too
                call(
                    runtime,
                    server.stop,
                    ServerArgs(server=candidate, grace_s=state.target.launch.stop_grace_s),
                )
                running = None
            with progress.within(confirming_line(looks[-1], cfg.confirm_below)):  # on every line of the pair
                ref2 = launch_beside(state, runtime, where, argv, state.launches + 2, role_of(state, where))
                cand2 = launch_beside(
                    state, runtime, state.target.repo, state.argv, state.launches + 3, "confirm"
                )
                launches += 2
                _, _, confirmation, problem = judge_pair(
                    state, runtime, f"{label}-confirm", (ref2, cand2), where, noise
                )
                if state.options.confirm_alone:  # the confirming candidate is the session's server now
                    running = cand2
            if problem is not None:
                problem = f"on the confirming pair of launches: {problem}"
                return JudgedCandidate(
                    cand_m, problem=problem, tolerance=tolerance, launches_beside=launches, server=running
                )
            verdict = replicated(verdict, confirmation[-1].verdict)
    finally:
        stop_reference(state, runtime, keep={"confirm.pid"} if isinstance(running, ServerHandle) else set())
    judgement = judgement_of(
        verdict,
        looks,
        noise,
        cfg,
        (ref_m, cand_m),
        n,
        arms="interleaved",
        confirmation=confirmation,
        workload=state.target.workload,
        levels=others,
    )
    return JudgedCandidate(
        cand_m, judgement, tolerance=tolerance, launches_beside=launches, gate_note=note, server=running
    )
