"""Measuring for the CI rule: arms measured alike, candidate looks on one launch, the A/A store.

- The reference arm (the baseline, or an accepted candidate topped up) holds `repeats x looks`
  requests per prompt, measured on its own launch before the tree changes: its server is gone when
  the candidate runs, so it is measured with the full budget up front.
- A candidate gets `repeats` requests per prompt per look on its one launch; after each look the
  rule (agent/decision/stats/rule.py) says accepted, rejected, regression or undecided; undecided adds
  another batch, with no relaunch, until `looks` are spent (then inconclusive). Outputs are
  compared first: a candidate whose greedy outputs differ is never timed further.
- Both arms are measured alike: same client, workload and warm-up per launch (warm-ups are
  discarded and counted), and with patch profiling the dormant hook in the tree for both; each
  measurement records the tree's content fingerprint and what the tree held.
"""

from __future__ import annotations

import hashlib
import statistics
from typing import Any

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.decision.arms.arms import arms_in_use, probe_widens
from agent.decision.gate import outputs
from agent.decision.judging import JudgedCandidate
from agent.decision.stats.levels import at_level, level_looks, with_levels
from agent.decision.stats.noise import launch_noise, noise_for, sample_group, target_key
from agent.decision.stats.rule import arm_location, arm_of, arm_stats, look, percentile, serving_stats
from agent.serving import measure_server
from state.config.target import MeasureConfig
from state.door.calls import RepoArgs
from state.engines.workspace import WorkspaceSnapshot
from state.measurement.aa import AARecordArgs, AASample
from state.measurement.decision import DecisionConfig, Judgement, LaunchNoise, Look, Verdict
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig
from state.sessions.loop import LoopState
from tools import progress
from tools.client.stats import summarize
from tools.store import aa
from tools.workspace import repo


def content_fingerprint(head_tree_sha: str | None, tree_sha256: str, dirty: dict[str, str | None]) -> str:
    """Fingerprint of what the tree holds, independent of commit dates (pure)."""
    parts = [head_tree_sha or tree_sha256] + [f"{k}={v}" for k, v in sorted(dirty.items())]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def annotate(
    m: Measurement, snap: WorkspaceSnapshot, state: LoopState, instrumented: bool, warmups: int
) -> Measurement:
    """`m` with what its tree held: content fingerprint, instrumentation, uncommitted files."""
    hook = f" + dormant profiler in {state.instrumentation.relpath}" if state.instrumentation else ""
    others = len(snap.dirty_sha256) - (1 if state.instrumentation else 0)
    note = f"HEAD {snap.head_sha[:10]}{hook}" + (f" + {others} uncommitted file(s)" if others > 0 else "")
    return m.model_copy(
        update={
            "warmups_discarded": warmups,
            "instrumented": instrumented,
            "content_sha256": content_fingerprint(snap.head_tree_sha, m.tree_sha256, snap.dirty_sha256),
            "tree_note": note,
        }
    )


def measure_arm(
    state: LoopState, runtime: Runtime[LoopContext], label: str, repeats: int, warm_up: bool
) -> Measurement:
    """`repeats` requests per prompt on the running server (after the warm-ups if `warm_up`),
    annotated with the tree it ran."""
    cfg, w = state.target.measure, state.target.workload
    warmups = cfg.warmup_requests if warm_up else 0
    update: dict[str, MeasureConfig | WorkloadConfig] = {
        "measure": cfg.model_copy(update={"repeats": repeats, "warmup_requests": warmups})
    }
    if w is not None:  # warm-up windows on a fresh launch only; counted as requests discarded
        update["workload"] = w.model_copy(update={"warmup_windows": w.warmup_windows if warm_up else 0})
        warmups = warmup_requests(w) if warm_up else 0
    target = state.target.model_copy(update=update)
    m = measure_server(state.model_copy(update={"target": target}), runtime, label)
    snap = call(runtime, repo.snapshot, RepoArgs(repo=state.target.repo))
    return annotate(m, snap, state, bool(state.server and state.server.instrumented), warmups)


def warmup_requests(w: WorkloadConfig) -> int:
    """Requests a launch's warm-up windows send, at every level (the duration's: at least one per
    prompt) (pure)."""
    return w.warmup_windows * len(w.levels) * (w.requests if w.requests is not None else w.prompts)


def merge(first: Measurement, more: Measurement) -> Measurement:
    """Two batches measured on one launch as one measurement, windows numbered on (pure)."""
    wall = sum(
        sum(r.completion_tokens for r in m.requests) / m.output_tok_per_s
        for m in (first, more)
        if m.output_tok_per_s
    )
    shift = len(first.windows)
    later = [
        r.model_copy(update={"window": r.window + shift}) if r.window is not None else r
        for r in more.requests
    ]
    windows = first.windows + [w.model_copy(update={"index": w.index + shift}) for w in more.windows]
    merged = summarize(
        first.label, first.tree_sha256, first.requests + later, len(first.outputs), wall or 1.0, windows
    )
    keep = ("client", "warmups_discarded", "instrumented", "content_sha256", "tree_note")
    update = {k: getattr(first, k) for k in keep} | {"probe_ms": first.probe_ms + more.probe_ms}
    if first.beside is not None and more.beside is not None:  # bench_serving's, beside each batch
        update["beside"] = merge(first.beside, more.beside)
    return merged.model_copy(update=update)


def budget(state: LoopState) -> int:
    """Requests per prompt of a reference arm: `repeats x looks`; with interleaved arms only
    `repeats` (the reference is measured again beside each candidate), and so with paired blocks
    in `first_verdict` sessions (each block's launches get `repeats`: the baseline is one more) (pure)."""
    blocks = (
        state.options.paired_blocks and state.options.first_verdict and arms_in_use(state) == "alternating"
    )
    if arms_in_use(state) == "interleaved" or blocks:
        return state.target.measure.repeats
    return state.target.measure.repeats * state.target.decide.looks


def record_aa(state: LoopState, runtime: Runtime[LoopContext], m: Measurement) -> LaunchNoise:
    """Keep this baseline launch as an A/A sample; the launch noise from all of its target's."""
    return noise_for(keep_aa(state, runtime, m), state.target.decide, arms_in_use(state))


def keep_aa(state: LoopState, runtime: Runtime[LoopContext], m: Measurement) -> list[AASample]:
    """Keep this baseline launch as an A/A sample; every A/A sample of its target on its host."""
    key = target_key(state.target)
    sample = AASample(
        target_key=key,
        group=sample_group(m.content_sha256 or m.tree_sha256, state.target, m.client),
        session_id=state.session_id,
        launch_number=state.server.launch_number if state.server else state.launches,
        location_log=arm_location(arm_of(m, len(m.outputs), state.target.workload)),
        requests=len(m.requests),
    )
    return call(runtime, aa.record, AARecordArgs(target_key=key, sample=sample)).samples


def serving_note(m: Measurement) -> str:
    """`; at concurrency 8: 512.0 tok/s, 3.20 req/s, TPOT p50/p99 ..., 3 windows` for a `[workload]`
    measurement, one such part per concurrency level; "" for a sequential one (pure)."""
    notes = []
    for c in dict.fromkeys(w.concurrency for w in m.windows):
        at = at_level(m, c)
        s = serving_stats(at.requests, at.windows)
        timed = [r.tpot_ms for r in at.requests if r.timed]  # a merged stream times no token
        ttft = percentile([r.ttft_ms for r in at.requests], 0.5)
        notes.append(
            f"; at concurrency {c}: {s['output_tok_per_s']:.1f} tok/s, "
            f"{s['requests_per_s']:.2f} req/s, "
            + (
                f"TPOT p50/p99 {percentile(timed, 0.5):.1f}/{percentile(timed, 0.99):.1f} ms, "
                if timed
                else "TPOT not timed (every stream merged), "
            )
            + f"TTFT p50/p99 {ttft:.1f}/{s['ttft_ms_p99']:.1f} ms over {s['windows']} windows"
        )
    return "".join(notes)


def beside_note(m: Measurement) -> str:
    """`; beside, sglang.bench_serving (sglang 0.5.9): at concurrency 8: ...` for a measurement
    that bench_serving measured too (`use = "both"`), its figures as `serving_note`'s (sequential:
    its TPOT and TTFT p50); "" for one client (pure)."""
    b = m.beside
    if b is None:
        return ""
    figures = serving_note(b).removeprefix("; ") or (
        f"TPOT p50 {b.tpot_ms.median:.1f} ms, TTFT p50 {b.ttft_ms.median:.1f} ms over {len(b.requests)} requests"
    )
    return f"; beside, {b.client}: {figures}"


def machine_drift(reference: Measurement, candidate: Measurement, widens: bool = True) -> float:
    """How much faster or slower the host ran for one arm than for the other (>= 1; 1 when not
    recorded, or not `widens`: `arms.probe_widens`): the ratio of their median CPU-probe times (pure)."""
    if not widens or not reference.probe_ms or not candidate.probe_ms:
        return 1.0
    a, b = statistics.median(reference.probe_ms), statistics.median(candidate.probe_ms)
    return max(a / b, b / a) if a > 0 and b > 0 else 1.0


def texts_compared(reference: Measurement, schedule_gate: bool) -> bool:
    """Whether timing measurements like `reference` are compared text by text: always before
    `schedule_gate`; with it, only where each request went alone and the baseline's own repeats
    agreed (pure)."""
    return not schedule_gate or (outputs.alone(reference) and reference.outputs_stable)


def outputs_problem(
    reference: Measurement, candidate: Measurement, exact: bool = True, schedule_gate: bool = False
) -> str | None:
    """Why the candidate's outputs fail the gate, or None (pure); `exact=False` (the tolerance
    policy, judged on the correctness set's scores instead) checks only that repeats agree.
    `schedule_gate` (LoopOptions): a timing measurement whose schedule follows the server's speed
    (workload windows, an engine's benchmark), or whose baseline's own repeats alone differ, is
    not compared text by text: the correctness set judges the outputs (gate/schedule.py)."""
    if not texts_compared(reference, schedule_gate):
        return None
    if exact and candidate.outputs != reference.outputs:
        changed = sum(a != b for a, b in zip(reference.outputs, candidate.outputs, strict=False))
        return f"outputs changed for {changed}/{len(reference.outputs)} prompt(s)"
    if not candidate.outputs_stable:
        return "outputs differ between repeats of the same prompt"
    return None


def unlike(reference: Measurement, candidate: Measurement) -> str | None:
    """Why the two arms are not comparable, or None (pure; unrecorded fields are not compared)."""
    if None not in (reference.instrumented, candidate.instrumented) and (
        reference.instrumented != candidate.instrumented
    ):
        return "the arms ran with different instrumentation"
    if reference.client != candidate.client:
        return f"the arms were measured by different clients ({reference.client} vs {candidate.client})"
    return None


def judgement_of(
    verdict: Verdict,
    looks: list[Look],
    noise: LaunchNoise,
    cfg: DecisionConfig,
    both: tuple[Measurement, Measurement],
    n_prompts: int,
    **more: Any,
) -> Judgement:
    """The rule's answer with what it rests on: the looks, the noise, both arms' stats (pure);
    `more` sets the interleaved fields (`arms`, `confirmation`) and `workload` its objective."""
    w = more.pop("workload", None)
    ref, cand = (at_level(m, w.primary) for m in both) if w is not None else both  # the judged level
    arm = {"n_prompts": n_prompts, "workload": w}
    return Judgement(
        objective=w.objective if w is not None else None,
        verdict=verdict,
        looks=looks,
        launch_noise=noise,
        min_gain=cfg.min_gain,
        confidence=cfg.confidence,
        reference=arm_stats(ref.requests, warmups=ref.warmups_discarded, windows=ref.windows, **arm),
        candidate=arm_stats(cand.requests, warmups=cand.warmups_discarded, windows=cand.windows, **arm),
        **more,
    )


def judge_candidate(state: LoopState, runtime: Runtime[LoopContext], label: str) -> JudgedCandidate:
    """Measure the candidate look by look on its own launch, and judge it."""
    ref, cfg = need(state.reference, "reference measurement"), state.target.decide
    noise = state.launch_noise or launch_noise([], cfg)
    reps, exact = state.target.measure.repeats, not outputs.scored(state)
    with progress.within(f"look 1/{cfg.looks}"):
        m = measure_arm(state, runtime, label, reps, warm_up=True)
    sg = state.options.schedule_gate
    problem, tolerance, note = outputs_problem(ref, m, exact, sg) or unlike(ref, m), None, None
    if problem is None:  # the correctness set, before any timing verdict
        problem, tolerance, note = outputs.check(state, runtime, len(ref.outputs))
    if problem is not None:
        return JudgedCandidate(m, problem=problem, tolerance=tolerance, gate_note=note)
    n, w = len(ref.outputs), state.target.workload
    ref_arm = arm_of(ref, n, w)
    widens = probe_widens(state)
    looks = [look(ref_arm, arm_of(m, n, w), noise, cfg, 1, machine_drift(ref, m, widens))]
    others = level_looks(ref, m, w, noise, cfg, 1, machine_drift(ref, m, widens))  # other concurrency levels
    while with_levels(looks[-1].verdict, others) == "undecided":
        k = len(looks) + 1
        with progress.within(f"look {k}/{cfg.looks}"):
            m = merge(m, measure_arm(state, runtime, label, reps, warm_up=False))
        if (problem := outputs_problem(ref, m, exact, sg)) is not None:
            return JudgedCandidate(m, problem=problem, tolerance=tolerance, gate_note=note)
        looks.append(look(ref_arm, arm_of(m, n, w), noise, cfg, k, machine_drift(ref, m, widens)))
        others = level_looks(ref, m, w, noise, cfg, k, machine_drift(ref, m, widens))
    verdict = with_levels(looks[-1].verdict, others)
    judgement = judgement_of(verdict, looks, noise, cfg, (ref, m), n, workload=w, levels=others)
    more = state.iteration < state.options.max_iterations
    per_repeat = len(w.levels) if w is not None else max(n, 1)  # a window per level, or a request per prompt
    measured = len(m.windows) // per_repeat if w is not None else len(m.requests) // per_repeat
    missing = budget(state) - measured
    if judgement.verdict == "accepted" and more and missing > 0:  # it becomes the next reference
        m = merge(m, measure_arm(state, runtime, label, missing, warm_up=False))
    return JudgedCandidate(m, judgement, tolerance=tolerance, gate_note=note)
