"""The `search` proposer: the next launch config of `[search]`, picked by optuna's TPE (pure).

A trial is a `Proposal` with `launch_argv` and no diff, named `search-N`: relaunched, its outputs
checked and measured by the decision rule against the reference like any candidate; an accepted
config becomes the new reference (so the best is confirmed against the one before it, and the
first against the default, with the full rule).

Nothing is kept outside the session: the study is rebuilt at every call from the session's
decisions (each trial's config read back from its recorded launch command, its objective the
candidate's median TPOT; a trial rejected for its outputs, or that failed, is a failed optuna
trial), and the sampler is seeded from `[search] seed` and the number of trials so far. The same
state therefore gives the same next trial, in a live run, on resume and in `perfloop replay`.

The first trial starts from what the diagnosis implicates: the knobs a finding names (`Knob.
implicated_by`, else `state.proposers.search.IMPLICATED`) are set to their `first` value, the rest left as
launched. Later trials are TPE's, over every knob; a config already tried (or the one running)
is asked again with another seed, and when none new is found in `ASKS` asks the search takes an
untried configuration of the knobs' grid (`search_grid` sessions), stopping as exhausted only when
every configuration was tried; sessions recorded before stop after the asks, as they ran.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from agent.decision.stats.mechanism import past_bound
from agent.proposer.tuning import grid
from agent.proposer.tuning.budget import budget_left, trials_of
from agent.proposer.tuning.knobs import config_of, describe_config, with_config
from agent.proposer.tuning.refusals import without_math
from playbooks.engine import flag_value
from playbooks.predict import batching_gain_bound
from state.measurement.decision import ArmStats
from state.measurement.workload import OBJECTIVES, Objective, WorkloadConfig
from state.proposers.search import HOST_BOUND, Knob, KnobValue, SearchConfig
from state.sessions.loop import Decision, LoopState, Proposal
from tools.engines.registry import engine

ASKS = 20
"""Seeds tried for a config not yet tried before the search counts as exhausted."""

if TYPE_CHECKING:  # optuna is imported when a trial is picked (it takes seconds to import)
    import optuna
    from optuna.distributions import BaseDistribution


def distribution(knob: Knob) -> BaseDistribution:
    """The knob's optuna distribution."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if knob.type == "int":
        assert knob.low is not None and knob.high is not None  # the model's validator
        step = 1 if knob.log else knob.step or 1
        return IntDistribution(int(knob.low), int(knob.high), log=knob.log, step=step)
    if knob.type == "float":
        assert knob.low is not None and knob.high is not None
        return FloatDistribution(knob.low, knob.high, log=knob.log)
    if knob.type == "bool":
        return CategoricalDistribution([False, True])
    return CategoricalDistribution(list(knob.choices))


def searched(state: LoopState, cfg: SearchConfig) -> list[Knob]:
    """The knobs searched: all, less those that change numerics when outputs must be identical."""
    exact = state.target.correctness.policy == "exact"
    return [k for k in cfg.knobs if not (k.numerics and exact)]


def arm_metric(stats: ArmStats, objective: Objective) -> float | None:
    """An arm's value of a `[workload]` objective, in its unit (None where not recorded) (pure)."""
    return {
        "output_throughput": stats.output_tok_per_s,
        "request_throughput": stats.requests_per_s,
        "goodput": stats.goodput_tok_per_s,
        "tpot_p50": stats.tpot_ms_median,
        "tpot_p99": stats.tpot_ms_p99,
        "ttft_p50": stats.ttft_ms_median,
        "ttft_p99": stats.ttft_ms_p99,
    }[objective]


def _objective(d: Decision, workload: WorkloadConfig | None = None) -> float | None:
    """The trial's objective, lower is better, None if it failed (or regressed at a concurrency
    level other than the primary): the candidate's median TPOT (ms), or under `[workload]` the log
    of its objective's cost at the primary level (minus the log of a throughput)."""
    moved = not d.numerics.passed if d.numerics is not None else d.outputs_identical is False
    if d.verdict == "failed" or moved or d.tpot_ms_after is None:
        return None
    if d.judgement and any(lk.verdict == "regression" for lk in d.judgement.levels):
        return None  # a regression at another concurrency level: a FAIL, as changed outputs are
    cand = d.judgement.candidate if d.judgement else None
    if workload is None or cand is None:
        return d.tpot_ms_after
    value = arm_metric(cand, workload.objective)
    if value is None or value <= 0:
        return None
    return -math.log(value) if OBJECTIVES[workload.objective][2] else math.log(value)


def _study(state: LoopState, knobs: list[Knob], cfg: SearchConfig, seed: int) -> optuna.Study:
    import optuna
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {k.name: distribution(k) for k in knobs}
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=cfg.startup_trials)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    for d in trials_of(state):
        params = {n: v for n, v in config_of(d.launch_argv or [], knobs).items() if _fits(dists[n], v)}
        value = _objective(d, state.target.workload)
        study.add_trial(
            create_trial(
                params=params,
                distributions={n: dists[n] for n in params},
                value=value,
                state=TrialState.COMPLETE if value is not None else TrialState.FAIL,
            )
        )
    return study


def _fits(dist: BaseDistribution, value: KnobValue) -> bool:
    try:
        return dist._contains(dist.to_internal_repr(value))
    except (ValueError, TypeError):
        return False


def first_config(state: LoopState, knobs: list[Knob]) -> dict[str, KnobValue]:
    """The first trial's config: the implicated knobs at their `first` value (pure)."""
    findings = [f.playbook for f in state.diagnosis.findings] if state.diagnosis else []
    phases = state.diagnosis.decode_phases if state.diagnosis else None
    if phases is not None and phases.host_bound:
        findings.append(HOST_BOUND)
    return {
        k.name: k.first
        for k in knobs
        if k.first is not None and any(k.implicated(p) for p in findings) and _fits(distribution(k), k.first)
    }


def next_config(state: LoopState, cfg: SearchConfig) -> dict[str, KnobValue] | None:
    """The next config to try, or None when none untried was found (pure)."""
    return picked(state, cfg)[0]


def picked(state: LoopState, cfg: SearchConfig) -> tuple[dict[str, KnobValue] | None, str]:
    """(the next config, where it came from: `first`, `tpe` or `grid`), or (None, why none) (pure):
    TPE asked up to `ASKS` times for a config not yet tried; then, in `search_grid` sessions, an
    untried one of the grid (agent/proposer/tuning/grid.py), so the search goes on while any is left."""
    knobs = searched(state, cfg)
    seen = {tuple(d.launch_argv or []) for d in trials_of(state)} | {tuple(state.argv)}
    done = len(trials_of(state))
    if done == 0:
        first = first_config(state, knobs)
        if first and tuple(with_config(state.argv, knobs, first)) not in seen:
            return first, "first"
    if state.options.search_without_math and (again := without_math(state, knobs, seen, trials_of(state))):
        return again, "without-math"
    dists = {k.name: distribution(k) for k in knobs}
    for attempt in range(ASKS):
        study = _study(state, knobs, cfg, cfg.seed + done + 1000 * attempt)
        config = study.ask(dists).params
        if tuple(with_config(state.argv, knobs, config)) not in seen:
            return config, "tpe"
    exhausted = f"search space exhausted after {done} trials"
    if not state.options.search_grid:
        return None, exhausted
    untried = grid.untried(knobs, lambda c: tuple(with_config(state.argv, knobs, c)) in seen, cfg.seed + done)
    if untried is not None:
        return untried, "grid"
    size = grid.size(knobs)
    if size is None:  # (a continuous or very large space: random draws all tried)
        return None, f"search stopped after {done} trials: {grid.DRAWS} random configurations were all tried"
    return None, f"{exhausted}: every one of the {size} configurations tried"


def search_proposal(state: LoopState, now: float | None = None) -> tuple[Proposal | None, str]:
    """(the next trial, what it tries) or (None, why the search stops) (pure); `now` as in
    `budget_left`."""
    cfg = state.target.search
    if cfg is None:
        return None, "no [search] in the target file"
    spent = budget_left(state, cfg, now)
    if spent is not None:
        return None, spent
    knobs = searched(state, cfg)
    if not knobs:
        return None, '[search]: every knob changes numerics; they need [correctness] policy = "numerics"'
    config, source = picked(state, cfg)
    if config is None:
        return None, source
    n = len(trials_of(state)) + 1
    what = describe_config(config, knobs)
    implicated = n == 1 and config == first_config(state, knobs) and bool(config)
    why = "the knobs the diagnosis implicates" if implicated else "optuna TPE over the search's history"
    if source == "grid":
        why = f"an untried configuration of the grid: optuna TPE asked for tried ones {ASKS} times"
    if source == "without-math":
        why = "the last trial without the knobs that moved the math: the output gate refused it for them"
    argv = with_config(state.argv, knobs, config)
    predicted = batching_prediction(state, argv)
    bound = ""
    if predicted is not None and state.diagnosis is not None and state.diagnosis.decode_phases is not None:
        bound = (
            f" Predicted: at most {predicted:.2f}x output throughput (more sequences share each "
            f"decode step; {state.diagnosis.decode_phases.line()})."
        )
    return Proposal(
        iteration=state.iteration,
        source=f"search-{n}",
        title=f"search trial {n}: {what}",
        explanation=f"Launch-option search, trial {n} of at most {cfg.max_trials} ({why}): {what}.{bound}",
        diff="",
        files=[],
        expected_gain_share=0.0,
        expected_gain_ms=None,
        evidence=[],
        launch_argv=argv,
        predicted_speedup=predicted,
        exact=bool(config) and all(k.exact for k in knobs if k.name in config),
    ), what


def batching_prediction(state: LoopState, argv: list[str]) -> float | None:
    """The output-throughput gain bound of the trial's change to the sequences decoded per step
    (`predict.batching_gain_bound`), where the profile read vLLM's phase scopes, a `[workload]`
    keeps requests in flight, and both launch commands set the kind's batch flag to different
    numbers; None otherwise (pure)."""
    d, w = state.diagnosis, state.target.workload
    flag = engine(state.target.kind).batch_flag
    if d is None or d.decode_phases is None or w is None or flag is None:
        return None
    old, new = flag_value(state.argv, flag), flag_value(argv, flag)
    if old is None or new is None or not (old.isdigit() and new.isdigit()) or old == new:
        return None
    return batching_gain_bound(w.primary, int(old), int(new))


def trial_lines(state: LoopState) -> list[str]:
    """One line per search trial: config, objective with its CI, verdict (pure)."""
    cfg = state.target.search
    knobs = cfg.knobs if cfg else []
    lines = []
    for d in trials_of(state):
        what = describe_config(config_of(d.launch_argv or [], knobs), knobs)
        tpot = f"TPOT {d.tpot_ms_after:.1f} ms" if d.tpot_ms_after is not None else "not measured"
        j, w = d.judgement, state.target.workload
        value = arm_metric(j.candidate, w.objective) if w and j and j.candidate else None
        if w is not None and value is not None:
            name, unit, _ = OBJECTIVES[w.objective]
            tpot = f"{name} {value:.1f} {unit}"
        ci = f", {j.last.speedup:.2f}x [{j.last.ci_low:.2f}, {j.last.ci_high:.2f}] vs reference" if j else ""
        predicted = f" (predicted at most {d.predicted_speedup:.2f}x)" if d.predicted_speedup else ""
        if (
            j
            and j.looks
            and (said := past_bound(j.last.speedup, (j.last.ci_low, j.last.ci_high), d.predicted_speedup))
        ):
            predicted = f" ({said})"
        lines.append(f"{d.source}: {what}: {tpot}{ci}{predicted} -> {d.verdict}")
    return lines
