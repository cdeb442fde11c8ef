"""Pure matching of one playbook's signature against a profile, and the generic fallback finding."""

import re

from playbooks.roofline import ITEMSIZE, roofline
from playbooks.schema import Playbook, Signature
from playbooks.signals import collective_fields, signal_evidence, signal_gain, signals_hold
from state.profiling.diagnosis import DiagnosisContext, Evidence, Finding, StepEffect
from state.profiling.profile import OpStat, ProfileSummary

GENERIC = "generic"
GENERIC_CONFIDENCE = 0.2
MAX_EVIDENCE = 5


def match_playbook(playbook: Playbook, profile: ProfileSummary, ctx: DiagnosisContext) -> Finding | None:
    """The playbook's finding if its signature holds on this profile, else None."""
    sig = playbook.signature
    groups = [
        op
        for op in profile.ops
        if op.self_us > 0 and op_matches(op, sig, ctx.active_tokens, profile.rank_steps)
    ]
    if sig.dense_experts:
        groups = dense_experts(groups, profile)
    share = min(sum(op.share for op in groups), 1.0)
    if sig.op_names and (not groups or share < sig.min_share):
        return match_graph(playbook, profile, ctx)
    if not signals_hold(sig, profile):
        return None
    gain_share = _gain_share(playbook, groups, profile, ctx)
    evidence = [
        _evidence(op, playbook.evidence_note, profile, ctx.active_tokens) for op in groups[:MAX_EVIDENCE]
    ]
    evidence += signal_evidence(sig, profile, playbook.evidence_note, ctx.active_tokens)[:MAX_EVIDENCE]
    return Finding(
        playbook=playbook.id,
        title=playbook.title_for(ctx.target_kind),
        confidence=playbook.confidence,
        expected_gain_share=gain_share,
        expected_gain_ms=_gain_ms(gain_share, ctx),
        explanation=playbook.explanation,
        evidence=evidence,
        roofline=roofline(groups[0], profile, ctx) if groups else None,
        effect=step_effect(playbook, groups, profile, ctx),
        decode_path="eager-decode",
    )


def match_graph(playbook: Playbook, profile: ProfileSummary, ctx: DiagnosisContext) -> Finding | None:
    """The playbook's finding from kernel names alone, when decode replays CUDA graphs (no operators
    or dims inside a replay) and the playbook has a graph signature that holds; else None."""
    gsig = playbook.graph_signature
    bounds = profile.step_bounds
    if gsig is None or bounds is None or bounds.graph_launches <= 0:
        return None
    kernels = [
        k
        for k in profile.kernels
        if k.graph_calls > 0 and any(re.search(p, k.name) for p in gsig.kernel_names)
    ]
    share = min(sum(k.share for k in kernels), 1.0)
    if not kernels or share < gsig.min_share:
        return None
    removed = gsig.factor * sum(k.device_us for k in kernels) / profile.rank_steps  # one rank's step
    evidence = [
        Evidence(
            op=k.name[:200],
            dims=[],
            self_us=k.device_us,
            share=k.share,
            calls=k.graph_calls,
            note=(
                f"{k.name[:120]}: {100 * k.share:.1f}% of device time, {k.device_us / profile.rank_steps / 1000:.3f} "
                f"ms per step over {k.graph_calls} calls replayed in CUDA graphs (no operator dims "
                "inside a replay: matched by kernel name)"
            ),
        )
        for k in kernels[:MAX_EVIDENCE]
    ]
    return Finding(
        playbook=playbook.id,
        title=playbook.title_for(ctx.target_kind),
        confidence=gsig.confidence,
        expected_gain_share=min(gsig.factor * share, 1.0),
        expected_gain_ms=_gain_ms(min(gsig.factor * share, 1.0), ctx),
        explanation=playbook.explanation,
        evidence=evidence,
        effect=StepEffect(device_removed_us=removed),
        decode_path="graph-decode",
    )


def step_effect(
    playbook: Playbook, groups: list[OpStat], profile: ProfileSummary, ctx: DiagnosisContext
) -> StepEffect | None:
    """The fix in the step's terms (device time removed, kernels removed, CUDA graphs), for a device
    trace with step bounds; None otherwise or for a gain kind with no such model (sync waits)."""
    if profile.time_basis != "device" or profile.step_bounds is None:
        return None
    gain, steps = playbook.gain, profile.rank_steps  # sums over every rank: one rank's step
    if gain.kind == "cast_fraction":
        removed = sum(op.self_us * cast_fraction(op, ctx.active_tokens) for op in groups)
        return StepEffect(device_removed_us=removed / steps)
    if gain.kind == "matched_share":
        return StepEffect(device_removed_us=gain.factor * sum(op.self_us for op in groups) / steps)
    if gain.kind == "device_idle":
        return StepEffect(graphs=True)
    if gain.kind in ("collective_transfer", "collective_wait") and profile.collectives is not None:
        c = profile.collectives
        lost = c.transfer_us if gain.kind == "collective_transfer" else c.wait_us
        return StepEffect(device_removed_us=gain.factor * lost)
    if gain.kind == "fusion":
        fusable = [k for k in profile.kernels if any(re.search(p, k.name) for p in gain.kernel_names)]
        return StepEffect(
            device_removed_us=gain.device_factor * sum(k.device_us for k in fusable) / steps,
            kernels_removed=gain.kernels_factor * sum(k.calls for k in fusable) / steps,
        )
    return None


def _gain_share(
    playbook: Playbook, groups: list[OpStat], profile: ProfileSummary, ctx: DiagnosisContext
) -> float:
    """The expected gain share by the playbook's gain model."""
    gain = playbook.gain
    if gain.kind == "cast_fraction":
        return min(sum(op.share * cast_fraction(op, ctx.active_tokens) for op in groups), 1.0)
    if gain.kind == "matched_share":
        return min(gain.factor * sum(op.share for op in groups), 1.0)
    if gain.kind == "fusion":
        total = sum(k.device_us for k in profile.kernels) or 1.0
        fusable = sum(
            k.device_us for k in profile.kernels if any(re.search(p, k.name) for p in gain.kernel_names)
        )
        return min(gain.factor * fusable / total, 1.0)
    return signal_gain(gain.kind, gain.factor, profile)


def primary_dims(op: OpStat) -> list[int]:
    """Dims of the op's first input that has any (the tensor an op like copy_ or to works on)."""
    return next((dims for dims in op.input_dims if dims), [])


def op_matches(op: OpStat, sig: Signature, active_tokens: int, steps: int = 1) -> bool:
    """Whether one operator group satisfies the name, dims, dtype and frequency conditions."""
    if not any(re.search(pattern, op.name) for pattern in sig.op_names):
        return False
    dims = primary_dims(op)
    if sig.dims_rank is not None and len(dims) != sig.dims_rank:
        return False
    if sig.dims_tail is not None and dims[-len(sig.dims_tail) :] != sig.dims_tail:
        return False
    if sig.dtype_change is not None and dtype_change(op) != sig.dtype_change:
        return False
    if sig.input_type is not None and not re.search(sig.input_type, (op.input_types or [""])[0]):
        return False
    if sig.min_calls_per_step is not None and op.calls / steps < sig.min_calls_per_step:
        return False
    ratio_min = sig.first_dim_over_active_tokens_min
    return ratio_min is None or (bool(dims) and dims[0] / active_tokens >= ratio_min)


ACTIVATIONS = r"^aten::(silu|gelu)"
"""The expert activations a dense mixture runs on `[tokens, experts, ffn]`."""


def dense_experts(groups: list[OpStat], profile: ProfileSummary) -> list[OpStat]:
    """The groups (matmuls) that project every expert's gate and up for every token: their weight
    (second input) has E x 2 x ffn outputs where the profile routes top-k over E experts
    (`aten::topk` on `[tokens, E]`) and runs an activation on `[tokens, E, ffn]` (pure)."""
    experts = {d[-1] for op in profile.ops if op.name == "aten::topk" and (d := primary_dims(op))}
    widths = {
        d[1] * 2 * d[2]
        for op in profile.ops
        if re.search(ACTIVATIONS, op.name)
        and len(d := primary_dims(op)) == 3
        and d[1] in experts
        and d[1] > 1
    }
    return [
        op for op in groups if len(op.input_dims) > 1 and op.input_dims[1] and max(op.input_dims[1]) in widths
    ]


def dtype_change(op: OpStat) -> str | None:
    """ "widen" or "narrow" for a copy whose (dst, src) element sizes differ; None otherwise."""
    if len(op.input_types) < 2:
        return None
    dst, src = ITEMSIZE.get(op.input_types[0]), ITEMSIZE.get(op.input_types[1])
    if dst is None or src is None or dst == src:
        return None
    return "widen" if dst > src else "narrow"


def cast_fraction(op: OpStat, active_tokens: int) -> float:
    """Fraction of a whole-pool cast saved by casting only the active rows: 1 - active / N."""
    dims = primary_dims(op)
    return min(max(1.0 - active_tokens / dims[0], 0.0), 1.0) if dims and dims[0] > 0 else 0.0


def _gain_ms(gain_share: float, ctx: DiagnosisContext) -> float | None:
    """The expected gain in ms of TPOT, when the baseline TPOT is known."""
    return gain_share * ctx.tpot_ms if ctx.tpot_ms is not None else None


def _evidence(op: OpStat, template: str, profile: ProfileSummary, active_tokens: int) -> Evidence:
    """An evidence line for one operator group, its note filled from the playbook's template."""
    dims = primary_dims(op)
    first_dim = dims[0] if dims else 0
    note = template.format(
        op=op.name,
        dims=str(op.input_dims),
        share_pct=100 * op.share,
        calls=op.calls,
        self_ms_per_step=op.self_us / profile.rank_steps / 1000,
        first_dim=first_dim,
        active_tokens=active_tokens,
        pool_ratio=first_dim / active_tokens,
        basis=profile.time_basis,
        calls_per_step=op.calls / profile.rank_steps,
        types=" <- ".join(op.input_types[:2]) or "-",
        location=op.location or "-",
        idle_pct=0.0,
        median_kernel_us=0.0,
        kernels_per_step=0.0,
        gaps=0,
        launch_ms_per_step=0.0,
        caller="-",
        issue_ms_per_step=0.0,
        device_ms_per_step=0.0,
        **collective_fields(profile.collectives),
    )
    return Evidence(
        op=op.name,
        dims=op.input_dims,
        self_us=op.self_us,
        share=op.share,
        calls=op.calls,
        note=note,
        location=op.location,
    )


def generic_finding(profile: ProfileSummary) -> Finding:
    """A low-confidence finding naming the heaviest operator groups, for when no playbook matched."""
    if not profile.ops:
        return Finding(
            playbook=GENERIC,
            title="The profile recorded no operators",
            confidence=0.0,
            expected_gain_share=0.0,
            expected_gain_ms=None,
            evidence=[],
            explanation=f"{profile.source} holds no operator events: check that the "
            "profiler wrapped the decode step and ran with record_shapes=True.",
        )
    top = profile.ops[0]
    note = "{op} with input dims {dims}: {share_pct:.1f}% of {basis} time, {self_ms_per_step:.3f} ms per step"
    where = (
        f", called from {top.location}"
        if top.location
        else " (record with with_stack=True to see the calling source line)"
    )
    return Finding(
        playbook=GENERIC,
        title=f"{top.name} takes {top.share:.0%} of {profile.time_basis} time",
        confidence=GENERIC_CONFIDENCE,
        expected_gain_share=0.0,
        expected_gain_ms=None,
        explanation=(
            f"No playbook matched. The heaviest operator group is {top.name} with input dims "
            f"{top.input_dims}: {top.share:.1%} of {profile.time_basis} self time over "
            f"{top.calls} calls in {profile.steps} steps{where}. Find where the decode step calls it "
            "with these dims and whether that work is needed for every token."
        ),
        evidence=[_evidence(op, note, profile, active_tokens=1) for op in profile.ops[:3]],
    )
