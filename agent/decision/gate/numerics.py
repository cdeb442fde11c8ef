"""The numerics policy (`[correctness] policy = "numerics"`, the default): three verdicts for outputs.

- `exact`: the candidate's greedy texts equal the baseline's where the schedule is controlled (the
  exact or schedule-aware gate of agent/decision/gate/outputs.py finds nothing);
- `within` the engine's numerics: its texts moved, but teacher-forced on the baseline's own texts it
  moves their tokens no further than the engine moves them itself (agent/decision/gate/moves.py,
  against the baseline's texts scored under the schedules the engine varies, measured here at the
  baseline: batches of two sizes, a warm prefix cache where the engine keeps one);
- `beyond`: refused with its figures, unless the target's `task` shows no loss of accuracy.

A proposal that declares itself exact (a playbook's or a knob's `exact = true`) passes only `exact`.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, host_dir, need
from agent.decision.gate import moves as numerics
from agent.decision.gate import task
from agent.decision.gate.correctness import all_prompts
from agent.decision.stats.noise import outputs_key
from agent.serving import launch_args
from state.door.calls import RepoArgs, ServerArgs
from state.measurement.numerics import (
    PRECISE,
    ForcedArgs,
    ForcedScores,
    NumericsArgs,
    NumericsNoise,
    NumericsSample,
    NumericsVerdict,
)
from state.sessions.loop import LoopState
from tools import server
from tools.engines.registry import engine
from tools.store import aa
from tools.tolerance import forced
from tools.workspace import repo


def applies(state: LoopState) -> bool:
    """Whether the session's output gate is the numerics policy (pure)."""
    return state.target.correctness.policy == "numerics"


def prompts(state: LoopState) -> list[str]:
    """The prompts teacher-forced (pure): the set's first ones (timing prompts first) and its long
    prompts last, `numerics_prompts` in all, so a bug that moves long contexts only is scored."""
    cfg = state.target.correctness
    long = state.long_prompts.prompts if state.long_prompts else []
    every = all_prompts(state)
    short = [p for p in every if p not in long]
    keep_long = long[-min(len(long), max(cfg.numerics_prompts // 3, 1)) :] if long else []
    return short[: cfg.numerics_prompts - len(keep_long)] + keep_long


def args(state: LoopState, schedule: str, **more: object) -> ForcedArgs:
    """The forced decode's arguments on the running server (pure)."""
    cfg = state.target.correctness
    return ForcedArgs(
        base_url=need(state.server, "running server").base_url,
        model=state.target.model,
        prompts=prompts(state),
        max_tokens=cfg.numerics_tokens,
        timeout_s=cfg.request_timeout_s,
        schedule=schedule,
        path=engine(state.target.kind).forced_path,
        **more,
    )


def schedules(state: LoopState) -> list[tuple[str, int, bool]]:
    """The engine's own schedules: (name, requests in flight, warm) (pure). Two batch sizes, the
    second every prompt at once; a warm prefix cache where the engine keeps one."""
    n = len(prompts(state))
    out = [("batch of 2", 2, False), (f"batch of {max(n, 3)}", max(n, 3), False)]
    if engine(state.target.kind).prefix_cache:
        out.append(("warm prefix cache", 1, True))
    return out


def measure_noise(state: LoopState, runtime: Runtime[LoopContext]) -> NumericsNoise:
    """On the baseline server: its greedy texts alone (the reference), then the same texts
    teacher-forced under each of the engine's schedules."""
    reference = call(runtime, forced.forced, args(state, "alone"))
    tokens = [[t.token for t in text.tokens] for text in reference.texts]
    measured = [
        call(runtime, forced.forced, args(state, name, continuations=tokens, concurrent=n, repeat=warm))
        for name, n, warm in schedules(state)
    ]
    precise = precise_scores(state, runtime, tokens)
    if precise is not None:
        measured.append(precise)
    noise = NumericsNoise(
        reference=reference,
        schedules=measured,
        key=outputs_key(state.target),
        session_id=state.session_id,
        task_texts=task.answers(state, runtime) if state.target.correctness.task_items else None,
    )
    return published(state, runtime, noise)


def precise_scores(
    state: LoopState, runtime: Runtime[LoopContext], tokens: list[list[str]]
) -> ForcedScores | None:
    """The reference's texts scored by the baseline's tree launched beside it with the engine's
    float32 flags (launch `state.launches + 1`), stopped right after; None where the engine has no
    such flags or the target turned `precision_reference` off. Its KV pool made small where the
    engine says how (`precise_small`, new sessions: `LoopOptions.precise_small`)."""
    contract = engine(state.target.kind)
    if not contract.precise or not state.target.correctness.precision_reference:
        return None
    flags = [*contract.precise, *(contract.precise_small if state.options.precise_small else ())]
    number, files = state.launches + 1, host_dir(state)
    snap = call(runtime, repo.snapshot, RepoArgs(repo=state.target.repo))
    handle = call(
        runtime,
        server.launch,
        launch_args(
            state.target,
            state.target.repo,
            [*state.argv, *flags],
            state.options.python,
            files / "logs" / f"server-{number}-precise.log",
            repo.tree_fingerprint(snap),
            number,
            files / "precise.pid",
        ),
    )
    try:
        at = state.model_copy(update={"server": handle})
        return call(runtime, forced.forced, args(at, PRECISE, continuations=tokens))
    finally:
        call(runtime, server.stop, ServerArgs(server=handle, grace_s=state.target.launch.stop_grace_s))


def launches_used(noise: NumericsNoise) -> int:
    """Servers the baseline's numerics launched beside it (pure): its precision reference's."""
    return sum(1 for s in noise.schedules if s.schedule == PRECISE)


def published(state: LoopState, runtime: Runtime[LoopContext], noise: NumericsNoise) -> NumericsNoise:
    """`noise` kept in the session store under its host, engine and model (through the door: a
    replay reads what the session read), with every session's kept there counted beside it."""
    moves = {
        s.schedule: max(
            (
                max(numerics.moves(r, t), default=0.0)
                for r, t in zip(noise.reference.texts, s.texts, strict=True)
            ),
            default=0.0,
        )
        for s in noise.schedules
    }
    sample = NumericsSample(
        key=noise.key,
        session_id=state.session_id,
        moves=moves,
        positions=sum(len(t.tokens) for t in noise.reference.texts),
    )
    kept = call(runtime, aa.record_numerics, NumericsArgs(sample=sample)).samples
    return noise.model_copy(
        update={
            "host_sessions": len(kept),
            "host_max_dlogprob": max((m for k in kept for m in k.moves.values()), default=0.0),
        }
    )


def candidate_scores(state: LoopState, runtime: Runtime[LoopContext]) -> ForcedScores:
    """The running candidate's scores of the baseline's texts, each prompt alone."""
    noise = need(state.numerics_noise, "the baseline's numerics")
    tokens = [[t.token for t in text.tokens] for text in noise.reference.texts]
    return call(runtime, forced.forced, args(state, "candidate", continuations=tokens))


def judge(state: LoopState, runtime: Runtime[LoopContext], texts_problem: str | None) -> NumericsVerdict:
    """The verdict on the running candidate: its teacher-forced scores against the engine's own
    moves (exact where its texts did not move, `texts_problem` None, and no logprob moved); a
    candidate beyond them answers the target's task, where it has one."""
    declared = state.proposal.exact if state.proposal is not None else False
    noise = need(state.numerics_noise, "the baseline's numerics")
    verdict = numerics.judge(
        noise.reference,
        noise.schedules,
        candidate_scores(state, runtime),
        texts_equal=texts_problem is None,
        declared_exact=declared,
        math_distance=state.options.numerics_math_distance,
        unit_floor=state.options.numerics_unit_floor,
    )
    cfg = state.target.correctness
    if verdict.verdict != "beyond" or declared or not cfg.task_items or noise.task_texts is None:
        return verdict
    ok, said = task.judge(cfg.task_items, noise.task_texts, task.answers(state, runtime), cfg.task_margin)
    return verdict.model_copy(update={"task": said, "task_passed": ok})


def line(v: NumericsVerdict, texts_problem: str | None) -> str:
    """The output gate's line for a verdict (pure): the test's figures, and what moved the texts."""
    if v.verdict == "exact":
        return "exact: greedy texts and their logprobs identical"
    said = f"{numerics.line(v)} (texts: {texts_problem or 'identical'})"
    return f"{said}; {v.task}" if v.task else said


def own_move(noise: NumericsNoise) -> tuple[float, float, str | None]:
    """The engine's own moves of the reference's tokens at the baseline (pure): (the mean move a
    token of its furthest side, that side's largest, the side); (its logits' rounding twice, None)
    where no side moved them."""
    typical = [
        sum(row) / len(row) if (row := numerics.typical(noise.reference, s)) else 0.0 for s in noise.schedules
    ]
    worst = max(range(len(typical)), key=typical.__getitem__) if typical else None
    if worst is None or typical[worst] <= 0:
        floor = numerics.rounding(noise.reference)
        return floor, floor, None
    side = noise.schedules[worst]
    return typical[worst], max(numerics.largest(noise.reference, side), default=0.0), side.schedule


def yardstick(noise: NumericsNoise) -> str:
    """The engine's own move with its figures (pure): `the engine's own moves (mean |dlogprob|
    0.0125 a token, float32 precision reference; largest 0.155)`, or its rounding where no side
    moved its tokens."""
    mean, top, side = own_move(noise)
    if side is not None:
        return f"the engine's own moves (mean |dlogprob| {numerics.fmt(mean)} a token, {side}; largest {numerics.fmt(top)})"
    return (
        f"the engine's rounding (no side of {len(noise.schedules)} moved its tokens: |dlogprob| its "
        f"logits' rounding, {numerics.fmt(mean)})"
    )


def judged_words(state: LoopState) -> list[str]:
    """Each change the numerics gate judged so far, kept ones first: `search-1 (kept): within (mean
    |dlogprob| 0.0081 vs 0.0125, 0.61x per prompt)` (pure)."""
    judged = sorted((d for d in state.decisions if d.numerics), key=lambda d: d.verdict != "accepted")
    return [
        f"{d.label} ({'kept' if d.verdict == 'accepted' else d.verdict}): {short(d.numerics)}"
        for d in judged
        if d.numerics
    ]


def summary_line(state: LoopState) -> str:
    """The session's output gate in one line (pure): the engine's own moves measured at the baseline,
    then each judged change's class with its figures, kept ones first."""
    noise = need(state.numerics_noise, "the baseline's numerics")
    host = f", {noise.host_sessions} session(s) on this host" if noise.host_sessions > 1 else ""
    words = judged_words(state)
    return f"numerics: exact, or within {yardstick(noise)}{host}" + (f"; {'; '.join(words)}" if words else "")


def short(v: NumericsVerdict) -> str:
    """A verdict in a few words with its figures (pure)."""
    if v.verdict == "exact":
        return "exact"
    if v.yardstick == "precise":
        said = (
            f"{v.verdict} (from the float32 math {numerics.fmt(v.precise_dlogprob)} vs the baseline's "
            f"{numerics.fmt(v.baseline_precise_dlogprob)}, {v.ratio:.2f}x per prompt)"
        )
    else:
        said = (
            f"{v.verdict} (mean |dlogprob| {numerics.fmt(v.mean_dlogprob)} vs "
            f"{numerics.fmt(v.engine_mean_dlogprob)}, {v.ratio:.2f}x per prompt)"
        )
    return said + (f", {v.task}" if v.task else "")
