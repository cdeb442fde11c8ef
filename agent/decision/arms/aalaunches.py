"""A/A evidence from the launches a session makes anyway, and one more launch where the store has
no measured launch noise.

- Alternating arms (agent/decision/arms/alternating.py) launch each tree up to k times, one server at a
  time, and reduce each launch to one location: the replicate launches of one tree are A/A
  launches. `keep_replicates` keeps them in the A/A store (`aa.record`, through the door, one
  call per candidate) as single-launch samples of the target on its host, grouped by tree and
  session (`noise.session_group`: only launches of one tree in one session are compared), so the
  next session's launch noise (`noise.launch_noise`, and through it alternating arms' prior)
  pools them. A tree launched once there adds no degree of freedom and is not kept.
- Sequential arms: while the store holds no measured launch noise of the target on its host
  (`launch_noise` over the other sessions' single launches and this baseline is still the
  conservative default), the baseline step stops the baseline server, launches the same tree
  once more and measures it alike (`aa_launch`, one launch a session; `[decide] auto_aa_pairs =
  0`: never). Both launches are A/A samples; the second one's server runs on for the profile,
  and its measurement is the session's baseline (a top-up for `keep_gain` is measured on it).
  Paired blocks in `first_verdict` sessions measure it for its location only, with as few
  requests as leave its sampling error under the launch noise's floor (one per prompt on a GPU
  host, `power.calibration_requests`), and keep the first launch's measurement as the baseline.

Every sample is kept under its session and launch number, so a resumed step, which launches again
under the same numbers, replaces its samples (`SessionStore.add_aa`) instead of adding to them.
Sessions recorded before this (`LoopOptions.aa_evidence` False) keep and launch nothing more, and
replay as they ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.decision.arms.arms import arms_in_use
from agent.decision.arms.measuring import keep_aa, measure_arm
from agent.decision.stats.noise import launch_noise, noise_for, session_group, target_key
from agent.decision.stats.power import calibration_requests, request_spread
from agent.decision.stats.rule import arm_location, arm_of
from agent.serving import start_server
from state.door.calls import ServerArgs
from state.measurement.aa import AARecordArgs, AASample
from state.measurement.arms import LaunchLocation
from state.measurement.decision import LaunchNoise
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig
from state.sessions.loop import LoopState
from tools import server
from tools.store import aa

Side = Literal["reference", "candidate"]
"""Which tree an alternating launch ran (`LaunchLocation.arm`)."""


def replicate_samples(
    state: LoopState,
    per_launch: Sequence[LaunchLocation],
    arms: Mapping[Side, Sequence[Measurement]],
    key: str | None = None,
) -> list[AASample]:
    """The A/A samples of alternating arms' launches: each arm launched at least twice, one sample
    per launch, grouped by the tree and this session (`arms[arm][i]` is the arm's i-th entry of
    `per_launch`), under `key` (cross-host arms' reference host; None: the target's) (pure)."""
    key, out = key or target_key(state.target), []
    for arm, ms in arms.items():
        located = [p for p in per_launch if p.arm == arm]
        if len(ms) < 2 or len(located) != len(ms):
            continue
        for p, m in zip(located, ms, strict=True):
            content = m.content_sha256 or m.tree_sha256
            out.append(
                AASample(
                    target_key=key,
                    group=session_group(state.session_id, content, state.target, m.client),
                    session_id=state.session_id,
                    launch_number=p.launch_number,
                    location_log=p.location_log,
                    requests=len(m.requests),
                )
            )
    return out


def keep_replicates(
    state: LoopState,
    runtime: Runtime[LoopContext],
    per_launch: Sequence[LaunchLocation],
    arms: Mapping[Side, Sequence[Measurement]],
) -> int:
    """Keep alternating arms' replicate launches in the A/A store; how many were kept."""
    samples = replicate_samples(state, per_launch, arms) if state.options.aa_evidence else []
    if samples:
        call(runtime, aa.record, AARecordArgs(target_key=samples[0].target_key, more=samples))
    return len(samples)


def wants_launch(state: LoopState, samples: Sequence[AASample], baseline_number: int) -> bool:
    """Whether the baseline step launches the tree once more: sequential arms (and paired blocks'
    alternating ones), `auto_aa_pairs` > 0,
    and the launch noise of the store's single launches (this session's own but its baseline left
    out: a resumed step's earlier A/A launch is replaced, not counted) still the default (pure)."""
    cfg = state.target.decide
    arms = state.arms.arms if state.arms is not None else cfg.arms  # (`auto` is never sequential)
    sequential = ("sequential", "alternating") if state.options.paired_blocks else ("sequential",)
    if not state.options.aa_evidence or cfg.auto_aa_pairs < 1 or arms not in sequential:
        return False
    evidence = [
        s
        for s in samples
        if s.shift_log is None and (s.session_id != state.session_id or s.launch_number == baseline_number)
    ]
    return launch_noise(evidence, cfg).source == "default"


@dataclass(frozen=True)
class Baseline:
    """The baseline after `aa_launch`."""

    state: LoopState
    """The state with the running server and the launches counted."""
    measurement: Measurement
    """The baseline's measurement: the A/A launch's when there was one (its server runs on), the
    first launch's where the A/A launch was measured for its location only (`cheap`)."""
    noise: LaunchNoise
    """The launch noise from every sample of the target on its host."""
    note: str
    """`1 A/A launch of the baseline tree (#1 -> #2: shift +1.3%, ...); `, or ""."""
    samples: list[AASample]
    """Every A/A sample of the target on its host, this baseline's (and its A/A launch's) included."""


def aa_launch(
    state: LoopState, runtime: Runtime[LoopContext], m: Measurement, samples: list[AASample], repeats: int
) -> Baseline:
    """The baseline `m` (kept: `samples` holds it), and, where `wants_launch`, the same tree
    launched once more in its place and measured alike (`repeats` requests per prompt, warm-ups
    first; `cheap`: `power.calibration_requests` of them), kept as an A/A sample too."""
    cfg, first = state.target.decide, need(state.server, "baseline server")
    if not wants_launch(state, samples, first.launch_number):
        return Baseline(state, m, noise_for(samples, cfg, arms_in_use(state)), "", samples)
    w, blocks = state.target.workload, cheap(state)
    reps = repeats
    if blocks:  # only its location is used: as few requests as its sampling error allows
        reps = calibration_requests(request_spread([arm_of(m, len(m.outputs), w)]), n_units(m, w), repeats)
    call(runtime, server.stop, ServerArgs(server=first, grace_s=state.target.launch.stop_grace_s))
    at = state.model_copy(update={"server": None})
    second = start_server(at, runtime, instrumented=state.instrumentation is not None)
    state = state.model_copy(update={"server": second, "launches": second.launch_number})
    again = measure_arm(state, runtime, "baseline-aa", reps, warm_up=True)
    samples = keep_aa(state, runtime, again)
    noise = noise_for(samples, cfg, arms_in_use(state))
    shift = arm_location(arm_of(m, len(m.outputs), w)) - arm_location(arm_of(again, len(again.outputs), w))
    each = f", {reps} per prompt" if reps != repeats else ""
    note = (
        f"1 A/A launch of the baseline tree (#{first.launch_number} -> #{second.launch_number}{each}: "
        f"shift {shift:+.1%}; no measured launch noise of this target on this host was stored)"
    )
    if again.outputs != m.outputs:
        note += " WARNING: the two launches' outputs differ"
    return Baseline(state, m if blocks else again, noise, note + "; ", samples)


def cheap(state: LoopState) -> bool:
    """Whether the A/A launch is measured only for its location, with `calibration_requests`, and
    the first launch's measurement stays the baseline: paired blocks in `first_verdict` sessions,
    whose reference measurement serves the outputs and the plan's cost only (pure)."""
    o = state.options
    return o.first_verdict and o.paired_blocks and arms_in_use(state) == "alternating"


def n_units(m: Measurement, w: WorkloadConfig | None) -> int:
    """The strata of a measurement's location: its prompts, or one of windows (pure)."""
    return 1 if w is not None and m.windows else max(len(m.outputs), 1)
