"""Profile-level signals a signature can ask for: device idle between kernels, decode-path syncs,
collectives across ranks (their share, a straggler the others wait for).

Pure functions: whether a signature's signal conditions hold, the evidence behind them, and the
decode time they are measured against.
"""

from playbooks.schema import NOTE_FIELDS, Signature
from state.profiling.diagnosis import Evidence
from state.profiling.profile import CollectiveStats, ProfileSummary, SyncStat


def decode_time_us(profile: ProfileSummary) -> float:
    """Time of all profiled steps: the ProfilerStep wall time when known, else the summed self time."""
    if profile.step_wall_us is not None:
        return profile.step_wall_us * profile.steps
    return profile.total_self_us


def decode_syncs(profile: ProfileSummary) -> list[SyncStat]:
    """Sync rows with at least one call in the decode path."""
    return [s for s in profile.syncs if s.decode_calls > 0]


def signals_hold(sig: Signature, profile: ProfileSummary) -> bool:
    """Whether every device and sync condition of the signature holds (True when it sets none)."""
    act = profile.device_activity
    if sig.device_idle_share_min is not None and (act is None or act.idle_share < sig.device_idle_share_min):
        return False
    if sig.median_kernel_us_max is not None and (
        act is None or act.median_kernel_us > sig.median_kernel_us_max
    ):
        return False
    if sig.issue_over_device_min is not None and not _host_bound(profile, sig.issue_over_device_min):
        return False
    if not _collectives_hold(sig, profile.collectives):
        return False
    if sig.min_decode_syncs_per_step is not None:
        per_step = sum(s.decode_calls for s in decode_syncs(profile)) / profile.rank_steps
        return per_step >= sig.min_decode_syncs_per_step
    return True


def _collectives_hold(sig: Signature, c: CollectiveStats | None) -> bool:
    """The collective conditions (True when the signature sets none; False without ranks)."""
    if sig.collective_share_min is None and sig.straggler_wait_min is None:
        return True
    if c is None:
        return False
    if sig.collective_share_min is not None and c.share < sig.collective_share_min:
        return False
    return sig.straggler_wait_min is None or wait_share(c) >= sig.straggler_wait_min


def wait_share(c: CollectiveStats) -> float:
    """Time waiting for the last rank over the median rank step."""
    median = sorted(c.rank_step_us)[len(c.rank_step_us) // 2]
    return c.wait_us / median if median > 0 else 0.0


def _host_bound(profile: ProfileSummary, ratio_min: float) -> bool:
    """Whether issuing the step's kernels takes at least ratio_min of the time running them."""
    b, act = profile.step_bounds, profile.device_activity
    if b is None:
        return act is not None and act.launch_bound
    return b.device_us > 0 and b.issue_us / b.device_us >= ratio_min


def signal_evidence(
    sig: Signature, profile: ProfileSummary, template: str, active_tokens: int
) -> list[Evidence]:
    """Evidence lines for the signature's signals: the idle device, then each decode-path sync."""
    out: list[Evidence] = []
    act = profile.device_activity
    conditions = (sig.device_idle_share_min, sig.median_kernel_us_max, sig.issue_over_device_min)
    if act is not None and any(c is not None for c in conditions):
        b = profile.step_bounds
        idle_us = act.span_us - act.busy_us
        fields = _fields(
            op="GPU idle between kernels",
            calls=act.gaps,
            us=idle_us,
            profile=profile,
            active_tokens=active_tokens,
            idle_pct=100 * act.idle_share,
            median_kernel_us=act.median_kernel_us,
            kernels_per_step=act.kernels / profile.rank_steps,
            gaps=act.gaps,
            launch_ms_per_step=act.launch_us / profile.rank_steps / 1000,
            share_pct=100 * act.idle_share,
            issue_ms_per_step=b.issue_us / 1000 if b else 0.0,
            device_ms_per_step=b.device_us / 1000 if b else act.busy_us / profile.rank_steps / 1000,
        )
        out.append(
            Evidence(
                op=fields["op"],
                dims=[],
                self_us=idle_us,
                share=act.idle_share,
                calls=act.gaps,
                note=template.format(**fields),
            )
        )
    c = profile.collectives
    if c is not None and (sig.collective_share_min is not None or sig.straggler_wait_min is not None):
        out.append(_collective_evidence(c, profile, template, active_tokens))
    if sig.min_decode_syncs_per_step is not None:
        total = decode_time_us(profile)
        for s in decode_syncs(profile):
            share = min(s.host_us / total, 1.0) if total else 0.0
            fields = _fields(
                op=s.name,
                calls=s.decode_calls,
                us=s.host_us,
                profile=profile,
                active_tokens=active_tokens,
                caller=s.caller,
                share_pct=100 * share,
            )
            location = s.caller if ".py:" in s.caller else None
            out.append(
                Evidence(
                    op=s.name,
                    dims=[],
                    self_us=s.host_us,
                    share=share,
                    calls=s.decode_calls,
                    note=template.format(**fields),
                    location=location,
                )
            )
    return out


def _collective_evidence(
    c: CollectiveStats, profile: ProfileSummary, template: str, active_tokens: int
) -> Evidence:
    """One line on the ranks: collective share, spread, wait and the straggler."""
    fields = _fields(
        op="collectives across ranks",
        calls=c.ranks,
        us=c.wait_us * profile.steps,
        profile=profile,
        active_tokens=active_tokens,
        share_pct=100 * c.share,
        **collective_fields(c),
    )
    return Evidence(
        op=fields["op"],
        dims=[],
        self_us=c.wait_us * profile.steps,
        share=c.share,
        calls=c.ranks,
        note=template.format(**fields),
    )


def collective_fields(c: CollectiveStats | None) -> dict:
    """The template fields of the ranks' collectives (neutral without ranks)."""
    if c is None:
        return dict(
            ranks=1,
            collective_pct=0.0,
            spread_pct=0.0,
            wait_ms_per_step=0.0,
            transfer_ms_per_step=0.0,
            straggler="-",
        )
    return dict(
        ranks=c.ranks,
        collective_pct=100 * c.share,
        spread_pct=100 * c.spread,
        wait_ms_per_step=c.wait_us / 1000,
        transfer_ms_per_step=c.transfer_us / 1000,
        straggler="-" if c.straggler is None else str(c.straggler),
    )


def _fields(
    op: str, calls: int, us: float, profile: ProfileSummary, active_tokens: int, **extra: object
) -> dict:
    """Template fields for a signal line: NOTE_FIELDS' names, neutral where they do not apply."""
    base: dict[str, object] = {
        key: "-" if isinstance(value, str) else 0 for key, value in NOTE_FIELDS.items()
    }
    base.update(
        op=op,
        dims="[]",
        calls=calls,
        self_ms_per_step=us / profile.rank_steps / 1000,
        calls_per_step=calls / profile.rank_steps,
        active_tokens=active_tokens,
        basis=profile.time_basis,
    )
    base.update(extra)
    return base


def signal_gain(kind: str, factor: float, profile: ProfileSummary) -> float:
    """Expected gain share of a signal fix: factor x (idle or blocked time) / decode time."""
    total = decode_time_us(profile)
    if total <= 0:
        return 0.0
    if kind == "device_idle":
        act = profile.device_activity
        lost = act.span_us - act.busy_us if act is not None else 0.0
    elif kind in ("collective_transfer", "collective_wait"):
        return collective_gain(kind, factor, profile.collectives)
    else:
        lost = sum(s.host_us * s.decode_calls / s.calls for s in decode_syncs(profile))
    return min(factor * lost / total, 1.0)


def collective_gain(kind: str, factor: float, c: CollectiveStats | None) -> float:
    """Expected gain share of a collective fix: factor x (the collectives' own time, or the time
    waiting for the last rank) / the median rank step; 0 without ranks."""
    if c is None:
        return 0.0
    median = sorted(c.rank_step_us)[len(c.rank_step_us) // 2]
    lost = c.transfer_us if kind == "collective_transfer" else c.wait_us
    return min(factor * lost / median, 1.0) if median > 0 else 0.0
