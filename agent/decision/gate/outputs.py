"""The output gate, by the target's `[correctness] policy`.

- `exact` (the default): the candidate's greedy outputs on the correctness set must equal the
  reference's (agent/decision/gate/correctness.py); in sessions that tell the math from the
  schedule (`LoopOptions.schedule_gate`), exactly where the schedule is controlled (each prompt
  alone) and, for the batch, within the baseline's own variation (agent/decision/gate/schedule.py).
- `numerics` (the default): `exact` where the texts did not move, else the candidate's move of the
  baseline's tokens against the engine's own (agent/decision/gate/numerics.py).
- `tolerance` (opt-in): the baseline's greedy continuation of each prompt of the set, generated
  and scored on the baseline server, is scored by the candidate on the same contexts (teacher
  forcing, tools/tolerance/score.py: logprobs from one prefill, greedy agreement on the decode path);
  `compare` gives the top-1 agreement and the largest logprob difference, which must meet the
  target's thresholds. Every candidate of the session is compared with the session's baseline,
  so accepted changes cannot drift step by step past the thresholds.
"""

from __future__ import annotations

from typing import NamedTuple

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.decision.gate import numerics, schedule
from agent.decision.gate.correctness import (
    all_prompts,
    batch_indices,
    differences,
    learn_long_prompts,
    names,
    take_outputs,
)
from agent.decision.stats.noise import outputs_key
from state.measurement.correctness import (
    CorrectnessConfig,
    OutputNoise,
    OutputNoiseArgs,
    OutputNoiseSample,
    OutputsResult,
)
from state.measurement.measure import Measurement
from state.measurement.numerics import NumericsVerdict
from state.measurement.tolerance import ScoreArgs, ScoreResult, ToleranceResult
from state.sessions.loop import LoopState
from state.sessions.updates import LoopUpdate
from tools.engines.registry import engine
from tools.store import aa
from tools.tolerance import score


def compare(reference: ScoreResult, candidate: ScoreResult, cfg: CorrectnessConfig) -> ToleranceResult:
    """Top-1 agreement and largest logprob difference of `candidate` against `reference`, on the
    reference's texts (pure). Agreement: the share of the continuations' characters the
    candidate's greedy decoding produced from the reference's context (`ScoredText.followed`);
    difference: that of the log-probabilities each arm gives the text's own token."""
    if [(t.prompt, t.continuation) for t in reference.texts] != [
        (t.prompt, t.continuation) for t in candidate.texts
    ]:
        raise ValueError("the arms were scored on different texts")
    followed: list[bool] = []
    positions, worst, where = 0, 0.0, ""
    for i, (r, c) in enumerate(zip(reference.texts, candidate.texts, strict=True), start=1):
        if r.tokens != c.tokens:
            raise ValueError(f"prompt {i}: the arms split the text into different tokens")
        if c.followed is None or len(c.followed) != len(c.continuation):
            raise ValueError(f"prompt {i}: the candidate did not decode along the reference's text")
        followed += c.followed
        for j, (lr, lc) in enumerate(zip(r.token_logprobs, c.token_logprobs, strict=True)):
            positions += 1
            if abs(lc - lr) > worst:
                worst, where = abs(lc - lr), f"prompt {i}, token {j + 1} ({r.tokens[j]!r})"
    return ToleranceResult(
        top1_agreement=sum(followed) / len(followed) if followed else 1.0,
        max_logprob_diff=worst,
        positions=positions,
        decoded_positions=len(followed),
        prompts=len(reference.texts),
        min_top1_agreement=need(cfg.min_top1_agreement, "min_top1_agreement"),
        max_logprob_diff_allowed=need(cfg.max_logprob_diff, "max_logprob_diff"),
        worst=where,
    )


def tolerant(state: LoopState) -> bool:
    """Whether this session's gate is the tolerance policy (pure)."""
    return state.target.correctness.policy == "tolerance"


def scored(state: LoopState) -> bool:
    """Whether the gate may pass texts that moved, on scores (tolerance, numerics): timing texts are
    then not compared one by one, only the correctness set judges them (pure)."""
    return state.target.correctness.policy != "exact"


def scores(state: LoopState, runtime: Runtime[LoopContext], continuations: list[str] | None) -> ScoreResult:
    """The running server's scores of the correctness set (continuations generated when None)."""
    cfg = state.target.correctness
    return call(
        runtime,
        score.score,
        ScoreArgs(
            base_url=need(state.server, "running server").base_url,
            model=state.target.model,
            prompts=all_prompts(state),
            continuations=continuations,
            max_tokens=cfg.max_tokens,
            timeout_s=cfg.request_timeout_s,
        ),
    )


def reference_outputs(
    state: LoopState, runtime: Runtime[LoopContext], baseline: Measurement | None = None
) -> LoopUpdate:
    """The baseline's part of the gate, as a state update: its outputs (exact) or its scores
    of its own greedy continuations (tolerance), after the context limit and the long prompts
    fitted to it; with `schedule_gate`, how its outputs moved with the schedule (`output_noise`:
    its batched texts against its texts alone, and `baseline`'s repeats alone)."""
    long = learn_long_prompts(state, runtime)
    state = state.model_copy(update={"long_prompts": long})
    if tolerant(state):
        return {"tolerance_reference": scores(state, runtime, None), "long_prompts": long}
    taken = take_outputs(state, runtime)
    update: LoopUpdate = {"correctness": taken, "long_prompts": long}
    if state.options.schedule_gate:
        noise = output_noise(state, taken, baseline)
        update["output_noise"] = (
            published(state, runtime, noise) if state.options.output_noise_store else noise
        )
    if numerics.applies(state):
        update["numerics_noise"] = measured = numerics.measure_noise(state, runtime)
        if used := numerics.launches_used(measured):
            update["launches"] = state.launches + used
    return update


def published(state: LoopState, runtime: Runtime[LoopContext], noise: OutputNoise) -> OutputNoise:
    """`noise` kept in the session store under its host and engine (`outputs.noise_record`, through
    the door: a replay reads what the session read), with every baseline's there pooled beside it
    (those in the same batch-invariant mode); the rule still judges against this session's own."""
    sample = OutputNoiseSample(
        key=outputs_key(state.target),
        session_id=state.session_id,
        observations=noise.observations,
        varied=noise.varied,
        deterministic_mode=noise.deterministic_mode,
    )
    kept = call(runtime, aa.record_output_noise, OutputNoiseArgs(sample=sample)).samples
    alike = [s for s in kept if s.deterministic_mode == noise.deterministic_mode]
    return noise.model_copy(
        update={
            "host_observations": sum(s.observations for s in alike),
            "host_varied": sum(s.varied for s in alike),
            "host_sessions": len(alike),
        }
    )


def output_noise(state: LoopState, taken: OutputsResult, baseline: Measurement | None) -> OutputNoise:
    """The baseline's A/A on outputs (pure): its batched texts against its texts alone, its
    timing repeats alone where its timing requests went one at a time, and the engine's
    batch-invariant mode if the launch carries it."""
    repeats = (0, 0)
    if baseline is not None and alone(baseline):
        by_prompt: dict[int, list[str]] = {}
        for r in baseline.requests:
            by_prompt.setdefault(r.prompt_index, []).append(r.text)
        repeats = schedule.repeats_moved(by_prompt)
    mode = engine(state.target.kind).deterministic_in(state.argv, state.target.launch.env)
    return schedule.noise_of(taken, batch_indices(state, taken), repeats, mode)


def alone(m: Measurement) -> bool:
    """Whether a timing measurement sent its requests one at a time, so that each text had the
    schedule of a prompt alone (pure): the sequential workload, by perfloop's client or an engine's
    benchmark (`--max-concurrency 1`); not `[workload]` windows."""
    return not m.windows


class GateAnswer(NamedTuple):
    """The output gate's answer on the running candidate."""

    problem: str | None
    """Why it fails the gate, or None."""
    tolerance: ToleranceResult | NumericsVerdict | None
    """The tolerance policy's result, or the numerics policy's verdict, when it scored the candidate."""
    note: str | None = None
    """Why it passed or failed, in one line (schedule-aware sessions)."""


def check(state: LoopState, runtime: Runtime[LoopContext], n_timing: int) -> GateAnswer:
    """Why the running candidate fails the gate (or None), the tolerance result if any, and the
    schedule-aware gate's line."""
    if tolerant(state):
        if state.tolerance_reference is None:  # never pass a candidate without its reference
            return GateAnswer("tolerance gate: the session holds no baseline scores to compare with", None)
        ref = state.tolerance_reference
        cand = scores(state, runtime, [t.continuation for t in ref.texts])
        try:
            result = compare(ref, cand, state.target.correctness)
        except ValueError as exc:  # a server that tokenizes the same text two ways
            return GateAnswer(f"tolerance gate: {exc}", None)
        return GateAnswer(None if result.passed else result.line(), result)
    if state.correctness is not None:
        taken = state.correctness
        named, batch = names(state, n_timing), batch_indices(state, taken)
        if state.output_noise is not None:
            problem, note = schedule.judge(
                state.output_noise, taken, take_outputs(state, runtime), batch, named
            )
        else:
            problem, note = differences(taken, take_outputs(state, runtime), named, batch), None
        if numerics.applies(state) and state.numerics_noise is not None:
            return by_numerics(state, runtime, problem, note)
        return GateAnswer(problem, None, note)
    return GateAnswer(None, None)


def by_numerics(
    state: LoopState, runtime: Runtime[LoopContext], problem: str | None, note: str | None
) -> GateAnswer:
    """The numerics policy's answer: the exact gate's `problem` (texts moved) judged by how far the
    candidate moves the baseline's tokens against the engine's own (agent/decision/gate/numerics.py)."""
    verdict = numerics.judge(state, runtime, problem)
    said = numerics.line(verdict, problem)
    if verdict.verdict == "exact" and note:
        said = f"{said}; {note}"
    if verdict.passed:
        return GateAnswer(None, verdict, said)
    refusal = numerics.line(verdict, None).removesuffix(" (texts: identical)")
    return GateAnswer(f"{problem}; {refusal}" if problem else f"outputs moved: {refusal}", verdict, said)
