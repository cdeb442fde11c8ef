"""A/A evidence without asking, and the power the session has, from the baseline step.

With interleaved arms no launch of a session measures the same tree twice side by side, so while
the A/A store holds fewer than `[decide] min_aa_pairs` pairs of this target on this host (or, with
`keep_gain`, while the launch noise alone keeps that gain out of reach) the baseline step launches
the tree again beside the running baseline server (`auto_aa_pairs` times at most, one launch
each) and keeps each pair as `perfloop calibrate` does (`aa_pair`, shared with it). Pairs sharing
the baseline launch count with fewer degrees of freedom (`noise.pair_df`). Then the power (agent/decision/stats/power.py) is computed from the launch noise and
the per-request spread seen on the baseline and the pairs, and with `[decide] keep_gain` the
requests per look and the looks are chosen for it: the session's target carries them from then on.
A sequential reference measured with fewer requests than that is topped up on its launch.
"""

from __future__ import annotations

from dataclasses import dataclass

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.decision.arms.arms import arms_in_use
from agent.decision.arms.interleave import launch_beside, pair_args, stop_reference
from agent.decision.arms.measuring import budget, measure_arm, merge, warmup_requests
from agent.decision.stats.noise import pair_noise, sample_group, target_key
from agent.decision.stats.power import calibration_requests, keeps, more_pairs, request_spread, sized
from agent.decision.stats.rule import Arm, arm_location, arm_of, combined_shift
from state.door.calls import PairArgs, PairResult
from state.engines.process import ServerHandle
from state.measurement.aa import AARecordArgs, AASample
from state.measurement.decision import LaunchNoise
from state.measurement.measure import Measurement
from state.measurement.power import Power
from state.sessions.loop import LoopState
from tools import bench, progress
from tools.store import aa


def aa_pair(
    state: LoopState,
    runtime: Runtime[LoopContext],
    first: ServerHandle,
    second: ServerHandle,
    label: str,
    looks: int | None = None,
    requests: int | None = None,
) -> tuple[AASample, LaunchNoise, PairResult]:
    """Measure two running launches of one tree with requests alternating (`repeats x looks` per
    prompt each, `looks` the target's unless given, or `requests`; the same warm-ups), keep the
    shift between them as an A/A pair; (the pair, the pair noise from all of the target's, both
    measurements)."""
    target = state.target
    n, reps = len(target.measure.prompts), target.measure.repeats * (looks or target.decide.looks)
    reps = requests or reps
    warm = target.measure.warmup_requests
    if target.workload is not None:  # its warm-up windows, counted in requests
        warm = warmup_requests(target.workload)
    pair = call(
        runtime,
        bench.measure_pair,
        PairArgs(
            reference=pair_args(state, first, f"{label}-a", reps, warm),
            candidate=pair_args(state, second, f"{label}-b", reps, warm),
        ),
    )
    a, b = arm_of(pair.reference, n, target.workload), arm_of(pair.candidate, n, target.workload)
    sample = AASample(
        target_key=target_key(target),
        group=sample_group(first.tree_sha256, target, pair.reference.client),
        session_id=state.session_id,
        launch_number=second.launch_number,
        beside=first.launch_number,
        location_log=arm_location(a),
        requests=len(pair.reference.requests) + len(pair.candidate.requests),
        shift_log=combined_shift(a, b),
    )
    samples = call(runtime, aa.record, AARecordArgs(target_key=sample.target_key, sample=sample)).samples
    return sample, pair_noise(samples, target.decide), pair


@dataclass(frozen=True)
class Powered:
    """What the baseline step keeps from the A/A pairs and the power."""

    state: LoopState
    """The state with the launches counted and the sized target."""
    measurement: Measurement
    """The baseline, topped up when a sequential reference needs more requests."""
    noise: LaunchNoise
    """The launch noise after the pairs."""
    power: Power
    """The power line's numbers."""
    note: str
    """`3 A/A pair(s) beside the baseline (shifts ...; power before them 1.282x); `, or ""."""


def start_pairs(
    state: LoopState,
    runtime: Runtime[LoopContext],
    noise: LaunchNoise,
    measured_s: float = 0.0,
    requests: int | None = None,
) -> tuple[LoopState, LaunchNoise, list[Arm], list[str]]:
    """Interleaved arms: A/A pairs beside the running baseline server while another is worth a
    launch (`power.more_pairs`: fewer than `min_aa_pairs` stored, or the launch noise alone keeps
    `keep_gain` out of reach), at most `auto_aa_pairs`, each measured with `requests` per prompt
    (None: one look's or the budget's, `short_aa_pairs`); the beside server is stopped after each.
    The session's own pairs do not count: a resumed step launches them again, under the same
    launch numbers, so the store replaces them (`SessionStore.add_aa`)."""
    cfg, base = state.target.decide, need(state.server, "baseline server")
    stored = call(runtime, aa.record, AARecordArgs(target_key=target_key(state.target))).samples
    others = sum(s.shift_log is not None and s.session_id != state.session_id for s in stored)
    arms: list[Arm] = []
    shifts: list[str] = []
    for i in range(1, cfg.auto_aa_pairs + 1):
        if not more_pairs(others + i - 1, noise, cfg):  # a resumed step replaces its own pairs
            break
        if i == 1:  # said before the first: a first session on a host calibrates for minutes
            each = base.startup_s + 2 * measured_s  # a launch beside, both arms measured
            progress.report(
                f"calibrating: up to {cfg.auto_aa_pairs} A/A pair(s) beside the baseline ({others} of this "
                f"target on this host so far), about {each * cfg.auto_aa_pairs / 60:.0f} min at most"
            )
        with progress.within(f"calibrating: pair {i}/{cfg.auto_aa_pairs}"):
            state, noise, sample, pair = _pair_beside(state, runtime, base, i, requests)
        n, w = len(state.target.measure.prompts), state.target.workload
        arms += [arm_of(pair.reference, n, w), arm_of(pair.candidate, n, w)]
        shifts.append(f"{sample.shift_log or 0.0:+.1%}")
    return state, noise, arms, shifts


def _pair_beside(
    state: LoopState, runtime: Runtime[LoopContext], base: ServerHandle, i: int, requests: int | None
) -> tuple[LoopState, LaunchNoise, AASample, PairResult]:
    """A/A pair `i`: the tree launched again beside the baseline server, both measured (`requests`
    per prompt, or as `short_aa_pairs` says), the beside server stopped."""
    progress.report("launching the tree again beside the baseline")
    try:
        beside = launch_beside(
            state, runtime, state.target.repo, state.kept_argv, state.launches + 1, "reference-tree"
        )
        state = state.model_copy(update={"launches": beside.launch_number})
        looks = 1 if state.options.short_aa_pairs else None  # one look's requests: the launch decides
        sample, noise, pair = aa_pair(state, runtime, base, beside, f"aa-{i}", looks, requests)
    finally:
        stop_reference(state, runtime)
    return state, noise, sample, pair


def powered(state: LoopState, runtime: Runtime[LoopContext], m: Measurement, noise: LaunchNoise) -> Powered:
    """A/A pairs at the start (interleaved arms), the power, and the target sized by it."""
    cfg, w = state.target.decide, state.target.workload
    arms = [arm_of(m, len(m.outputs), w)]
    prompts = 1 if w is not None and m.windows else len(m.outputs)
    unit = "windows" if w is not None and m.windows else "requests per prompt"
    note = ""
    if arms_in_use(state) == "interleaved" and cfg.auto_aa_pairs > 0:  # `auto` resolved
        ahead = keeps(
            noise.sigma_log, request_spread(arms), prompts, state.target.measure.repeats, cfg.looks, cfg
        )
        took_s = sum(r.ttft_ms + sum(r.itl_ms) for r in m.requests) / 1000  # the baseline's requests
        reps, each = None, ""
        if state.options.first_verdict:  # a pair's shift is its launches': few requests measure it
            reps = calibration_requests(request_spread(arms), prompts, state.target.measure.repeats)
            took_s *= reps / max(budget(state), 1)
            each = f", {reps} request(s) per prompt each"
        state, noise, more, shifts = start_pairs(state, runtime, noise, took_s, reps)
        arms += more
        if shifts:
            note = f"{len(shifts)} A/A pair(s) beside the baseline{each} (shifts {', '.join(shifts)}; "
            note += f"power before them {ahead:.3f}x); "
    power = sized(noise, request_spread(arms), prompts, state.target.measure.repeats, cfg, unit)
    target = state.target.model_copy(
        update={
            "measure": state.target.measure.model_copy(update={"repeats": power.repeats}),
            "decide": cfg.model_copy(update={"looks": power.looks}),
        }
    )
    before = budget(state)
    state = state.model_copy(update={"target": target})
    if (missing := budget(state) - before) > 0:  # a sequential reference holds the full budget
        m = merge(m, measure_arm(state, runtime, "baseline", missing, warm_up=False))
    return Powered(state, m, noise, power, note)
