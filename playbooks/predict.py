"""Predicted step time after a fix, from what bounds the step (host issuing kernels, or the device).

A decode step is modelled from its trace (`state.profiling.profile.StepBounds`) as
`serial_host + max(issue, device) + residual`: host work outside the launches runs alone, while
launching overlaps the kernels launched. A fix changes the terms (`StepEffect`): removing device
work shrinks `device`, CUDA graphs turn `issue` into one launch (and add the small gaps a replay
still has between kernels), fusion removes kernels. The prediction is the bound that remains, so
removing device work from a launch-bound step predicts little, and it is never below what physics
allows (`floor_us`): the device's remaining busy time, the host's remaining issue time, and the
step less everything the fix removes (Amdahl over the measured windows). Each finding states its
basis; without step windows on a GPU trace the prediction is unknown (None), not a guess.
Pure functions.

In detail. From each step window (`tools/trace/analyses/windows.py`; `StepBounds.windows` and
`ProfileSummary.step_source` say which marker found them, or that they were inferred) the trace
gives the host's time to issue the step's kernels (first to last launch call, syncs left out), the
host work outside that span, and the device's busy time (`tools/trace/analyses/bounds.py`; `StepBounds`, with
`bound` = `host launch` or `device`). Each finding's gain model becomes a `StepEffect` (device time
removed, kernels removed, or CUDA graphs: the issue time goes, the step being one graph launch, and
each kernel adds GRAPH_GAP_US of device idle), and the finding gets `step_ms`, `predicted_step_ms`,
`predicted_speedup`, `bound`, `bound_after`. Given the measured TPOT (the loop's reference
measurement, `diagnose --tpot-ms`), the host's terms (serial host, issue, residual) are first scaled
until the model gives that TPOT (`calibrated`); where the profiled device time alone exceeds the
TPOT (CUPTI slows graph replays too), the host terms go to their floor and the device time takes the
rest. Two findings each held back by the bound the other removes (a cast fix and CUDA graphs on an
eager step) are paired (`paired_with`, `paired_speedup`). Under CUDA graphs a replay has no
operators, so a playbook's `[graph_signature]` matches by kernel names instead (the pool cast's copy
kernel; `playbooks/match.py`). A fix without a step model (sync removal) shrinks the step by its
share but not below `max(issue, device)`. `Finding.basis` names the bound, windows, the model's
terms before and after, the floor and the paired fix. CPU traces keep the share-based gain (every op
is on the step's path); a GPU trace without step windows gets no number (`predicted_speedup` None,
basis `unknown: ...`). A trace without markers is never refused: only a trace with no events, or a
CUDA trace with no kernels, is (`tools/trace/analyses/checks.py`). Without a TPOT, a GPU trace's host time is
divided by how much the profiler inflated it, fitted on H200 traces (`playbooks/spread.py`: 1.92x
eager, 11.17x graph-replayed), and every prediction is a range (`predicted_speedup_low`/`_high`)
over the step windows and the inflations seen, which `diagnose` prints.

Tests: the corpus in `tests/data/traces/served/` (real demo-server traces by each profile method,
with `expected-*.json`: steps, bound, findings) is checked by `tests/unit/test_trace_windows.py`;
`playbooks/heldout.py` (and `benchmarks/gain_heldout.py`) checks the model leaving one launch out
on `tests/data/traces/gain/corpus.json` (`tests/unit/test_gain_heldout.py`).
"""

from state.profiling.diagnosis import Finding, StepEffect
from state.profiling.profile import StepBounds

GRAPH_GAP_US = 0.5
"""Device idle per kernel inside a CUDA-graph replay, in us. Measured on one H200 (the demo's glm5
preset, 5,818 kernels per step): 14.5 ms of kernels eager, 17.9 ms replayed (0.58 us per kernel);
with the full-pool cast 81 -> 82.3 ms (0.22 us)."""
PAIR_MIN_SPEEDUP = 1.5
"""Least predicted speedup of two fixes together, and least ratio over the product of each alone
(what independent fixes would give), for findings to be paired: each alone is held back by the
bound the other removes."""


def _terms(b: StepBounds, effects: list[StepEffect]) -> tuple[float, float]:
    """(issue, device) per step, in us, after the effects."""
    kernels = max(b.kernels, 1.0)
    removed_k = min(sum(e.kernels_removed for e in effects), kernels)
    device = max(b.device_us - sum(e.device_removed_us for e in effects), 0.0)
    issue = b.issue_us * (1 - removed_k / kernels)
    if any(e.graphs for e in effects) and b.graph_launches == 0:
        issue = 0.0
        device += (kernels - removed_k) * GRAPH_GAP_US
    elif b.graph_launches > 0:
        device -= removed_k * GRAPH_GAP_US
    return issue, max(device, 0.0)


def floor_us(b: StepBounds, effects: list[StepEffect]) -> float:
    """The shortest step physics allows after the effects, in us: the device still runs its
    remaining work, the host still issues what is left to launch, and the step shrinks by at most
    the device time and issue time the fixes remove."""
    issue, device = _terms(b, effects)
    removed = sum(e.device_removed_us for e in effects) + max(b.issue_us - issue, 0.0)
    return max(issue, device, b.wall_us - removed, 0.0)


def predict_step_us(b: StepBounds, effects: list[StepEffect]) -> float:
    """The step time after the effects, in us: the model's, never below `floor_us` (nor 1 ns)."""
    issue, device = _terms(b, effects)
    return max(b.serial_host_us + max(issue, device) + b.residual_us, floor_us(b, effects), 1e-3)


def bound_after(b: StepBounds, effects: list[StepEffect]) -> str:
    """What bounds the step after the effects: `host launch` or `device`."""
    issue, device = _terms(b, effects)
    return "host launch" if issue > device else "device"


def calibrated(b: StepBounds, tpot_us: float | None) -> StepBounds:
    """The bounds with the host's terms scaled so that the model gives the measured TPOT.

    A profiled step is slower than a served one, mostly on the host (the profiler records every
    operator and kernel: the demo's eager glm5 step took 257 ms profiled, 113 ms served; its
    graph-replayed step 93 ms against 82 ms). Scaling serial host, issue and residual time (the
    residual is no kernel's: launch latency, gaps the profiler widens) by one factor until
    `serial + max(issue, device) + residual` equals the TPOT keeps the device's time as measured
    (on the H200's API-method graph step, 88.0 ms profiled against 79.6 ms served, a residual of
    6.6 ms kept whole predicted the cast fix at 3.68x, realized 5.20x). Where even the device's time
    exceeds the TPOT (CUPTI slows kernels replayed in a graph too: 81.2 ms of device time there),
    the host terms go to their floor and the device time takes the rest of the excess. Without a
    TPOT (or a model that cannot reach it) the bounds are returned as they are."""
    if tpot_us is None or tpot_us <= 0:
        return b

    def step(scale: float) -> float:
        return (b.serial_host_us + b.residual_us) * scale + max(b.issue_us * scale, b.device_us)

    low, high = 0.02, 5.0
    device = b.device_us
    if step(low) > tpot_us and b.issue_us * low < b.device_us:  # the device's time takes the rest
        device = tpot_us - (b.serial_host_us + b.residual_us) * low
        if device <= b.issue_us * low:
            return b
        scale = low
    elif not step(low) <= tpot_us <= step(high):
        return b
    else:
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if step(mid) < tpot_us else (low, mid)
        scale = (low + high) / 2
    issue = b.issue_us * scale
    return b.model_copy(
        update={
            "wall_us": tpot_us,
            "host_us": b.host_us * scale,
            "issue_us": issue,
            "serial_host_us": b.serial_host_us * scale,
            "residual_us": b.residual_us * scale,
            "device_us": device,
            "bound": "host launch" if issue > device else "device",
        }
    )


def with_prediction(
    f: Finding,
    b: StepBounds | None,
    step_us: float | None,
    tpot_ms: float | None = None,
    time_basis: str = "device",
) -> Finding:
    """The finding with step_ms, predicted_step_ms, predicted_speedup, the bounds and the basis.

    With the trace's step bounds and an effect, the bound model predicts; with bounds and no effect
    the step shrinks by the finding's share, not below the bound that stays; a CPU trace without
    bounds shrinks by the share (every op is on the step's path); a GPU trace without bounds gets
    no number ("unknown")."""
    if b is not None and f.effect is not None:
        predicted = predict_step_us(b, [f.effect])
        share = min(max(1 - predicted / b.wall_us, 0.0), 1.0)
        return f.model_copy(
            update={
                "step_ms": b.wall_us / 1000,
                "predicted_step_ms": predicted / 1000,
                "predicted_speedup": b.wall_us / predicted,
                "expected_gain_share": share,
                "expected_gain_ms": share * tpot_ms if tpot_ms is not None else None,
                "bound": b.bound,
                "bound_after": bound_after(b, [f.effect]),
                "basis": _model_basis(b, [f.effect], tpot_ms),
            }
        )
    if b is not None:
        floor = max(b.issue_us, b.device_us)
        predicted = max(b.wall_us * (1 - min(f.expected_gain_share, 1.0)), floor, 1e-3)
        share = min(max(1 - predicted / b.wall_us, 0.0), 1.0)
        return f.model_copy(
            update={
                "expected_gain_share": share,
                "expected_gain_ms": share * tpot_ms if tpot_ms is not None else None,
                "step_ms": b.wall_us / 1000,
                "predicted_step_ms": predicted / 1000,
                "predicted_speedup": b.wall_us / predicted,
                "bound": b.bound,
                "basis": (
                    f"{_windows(b)}: the step less the finding's share ({f.expected_gain_share:.0%}), "
                    f"not below max(issue, device) = {floor / 1000:.3f} ms (no step model for this fix)"
                ),
            }
        )
    if time_basis != "cpu":
        return f.model_copy(
            update={
                "step_ms": step_us / 1000 if step_us else None,
                "basis": "unknown: no step windows in this trace (no step marker and no repeating "
                "kernel pattern), so host issue and device busy time per step are unknown; pass --steps N",
            }
        )
    if step_us is None or step_us <= 0 or f.expected_gain_share <= 0:
        return f.model_copy(update={"step_ms": step_us / 1000 if step_us else None})
    predicted = step_us * (1 - min(f.expected_gain_share, 0.99))
    return f.model_copy(
        update={
            "step_ms": step_us / 1000,
            "predicted_step_ms": predicted / 1000,
            "predicted_speedup": step_us / predicted,
            "basis": f"CPU trace: every operator runs on the step's path, so the step shrinks by the "
            f"share removed ({f.expected_gain_share:.0%}, Amdahl)",
        }
    )


def _windows(b: StepBounds) -> str:
    return f"{b.bound} bound, medians over {b.steps} step windows ({b.windows})"


def _model_basis(b: StepBounds, effects: list[StepEffect], tpot_ms: float | None) -> str:
    """What a model prediction assumed, in one line."""
    issue, device = _terms(b, effects)
    scaled = ", host terms scaled to the TPOT" if tpot_ms is not None and b.wall_us == tpot_ms * 1000 else ""
    return (
        f"{_windows(b)}{scaled}: step = serial host {b.serial_host_us / 1000:.3f} + max(issue "
        f"{b.issue_us / 1000:.3f} -> {issue / 1000:.3f}, device {b.device_us / 1000:.3f} -> "
        f"{device / 1000:.3f}) + residual {b.residual_us / 1000:.3f} ms; not below "
        f"{floor_us(b, effects) / 1000:.3f} ms (device left, issue left, step less what the fix removes)"
    )


def paired(findings: list[Finding], b: StepBounds | None) -> list[Finding]:
    """Each finding with the partner whose fix together with its own is predicted to gain most, when
    that pair clears PAIR_MIN_SPEEDUP and beats by that factor what the two would give if they were
    independent (the product of each alone)."""
    if b is None:
        return findings
    out = []
    for f in findings:
        best: tuple[float, str] | None = None
        for g in findings:
            if g is f or f.effect is None or g.effect is None:
                continue
            both = b.wall_us / predict_step_us(b, [f.effect, g.effect])
            alone = (f.predicted_speedup or 1.0) * (g.predicted_speedup or 1.0)  # if independent
            if (
                both >= PAIR_MIN_SPEEDUP
                and both >= PAIR_MIN_SPEEDUP * alone
                and (best is None or both > best[0])
            ):
                best = (both, g.playbook)
        if best is None:
            out.append(f)
            continue
        basis = f"{f.basis}; with {best[1]}: both effects in the same model" if f.basis else None
        out.append(f.model_copy(update={"paired_with": best[1], "paired_speedup": best[0], "basis": basis}))
    return out


def batching_gain_bound(concurrency: int, max_num_seqs: int, new_max_num_seqs: int) -> float:
    """Upper bound of the output-throughput gain of changing the cap on sequences per decode step
    from `max_num_seqs` to `new_max_num_seqs` at `concurrency` requests in flight: each step then
    serves min(concurrency, new) sequences instead of min(concurrency, old), and a step's cost
    does not shrink with its batch. Host-bound decode (vLLM's phase scopes: a step's host work
    outweighs its forward, and does not grow with the batch) comes close to it; model-bound decode
    stays below it (pure)."""
    return min(concurrency, new_max_num_seqs) / min(concurrency, max_num_seqs)
