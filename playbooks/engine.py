"""Load the playbook catalog and match it against a profile (the diagnose step)."""

import tomllib
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from playbooks.match import GENERIC, generic_finding, match_playbook
from playbooks.patches import with_patch
from playbooks.predict import paired, with_prediction
from playbooks.schema import Playbook
from playbooks.spread import fitted_for, served_bounds, speedup_range
from state.profiling.diagnosis import Diagnosis, DiagnosisContext, Finding
from state.profiling.profile import ProfileSummary, StepBounds
from tools.errors import ConfigError

CATALOG = Path(__file__).parent / "catalog"
TOP_OPS = 10


def load_playbooks(extra_dirs: Sequence[Path] = ()) -> list[Playbook]:
    """Every `<dir>/<id>/playbook.toml`: the built-in catalog first, then each extra dir in order."""
    found: dict[str, Playbook] = {}
    for catalog in [CATALOG, *map(Path, extra_dirs)]:
        if not catalog.is_dir():
            raise ConfigError(f"playbook dir {catalog} does not exist; pass a folder of <id>/playbook.toml")
        for file in sorted(catalog.glob("*/playbook.toml")):
            playbook = load_playbook(file)
            if playbook.id in found:
                raise ConfigError(
                    f"{file}: playbook id {playbook.id!r} is already defined in "
                    f"{found[playbook.id].source_dir}; rename one of them"
                )
            found[playbook.id] = playbook
    return list(found.values())


def load_playbook(file: Path) -> Playbook:
    """One playbook.toml, validated; ConfigError naming the file and the offending field."""
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{file}: cannot read the playbook ({err})") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{file}: invalid TOML ({err})") from err
    if "source_dir" in data:
        raise ConfigError(f"{file}: field 'source_dir' is set by the loader; remove it from the file")
    try:
        playbook = Playbook.model_validate({**data, "source_dir": str(file.parent)})
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ConfigError(f"{file}: field {field}: {first['msg']}") from err
    if playbook.id != file.parent.name or playbook.id == GENERIC:
        raise ConfigError(
            f"{file}: id {playbook.id!r} must equal its folder name {file.parent.name!r} "
            f"and must not be {GENERIC!r}"
        )
    return playbook


def diagnose(profile: ProfileSummary, ctx: DiagnosisContext, playbooks: Sequence[Playbook]) -> Diagnosis:
    """Findings of every matching playbook, best first; a generic finding when none matches."""
    found = [
        with_patch(f, pb, ctx) for pb in playbooks if (f := match_playbook(pb, profile, ctx)) is not None
    ]
    tpot_us = ctx.tpot_ms * 1000 if ctx.tpot_ms is not None else None
    raw = profile.step_bounds
    # A CPU trace's host is what it measures; a GPU trace's host is slowed by the profiler.
    inflation = 1.0 if profile.time_basis == "cpu" else ctx.host_inflation
    bounds = served_bounds(raw, tpot_us, inflation) if raw is not None else None
    step_us = profile.step_wall_us or profile.step_us or None
    predicted = [
        _ranged(with_prediction(f, bounds, step_us, ctx.tpot_ms, profile.time_basis), raw, tpot_us, inflation)
        for f in found
    ]
    findings = paired(predicted, bounds)
    findings.sort(key=_rank, reverse=True)
    return Diagnosis(
        findings=findings or [generic_finding(profile)],
        top_ops=profile.ops[:TOP_OPS],
        time_basis=profile.time_basis,
        step_source=profile.step_source,
        kernels=profile.kernels[:TOP_OPS] if any(k.graph_calls for k in profile.kernels) else [],
    )


def _ranged(f: Finding, raw: StepBounds | None, tpot_us: float | None, inflation: float | None) -> Finding:
    """The finding with its predicted speedup's range over the step windows (and, without a TPOT,
    the profiler's inflation), and the de-profiling named in its basis."""
    if raw is None or f.effect is None or f.predicted_speedup is None:
        return f
    low, high = speedup_range(raw, [f.effect], tpot_us, inflation)
    update: dict = {
        "predicted_speedup_low": min(low, f.predicted_speedup),
        "predicted_speedup_high": max(high, f.predicted_speedup),
    }
    if tpot_us is None and inflation != 1.0 and f.basis:
        k = fitted_for(raw) if inflation is None else None
        how = (
            f"{k.point:.2f}x (the median of H200 traces bound alike; {k.low:.2f}-{k.high:.2f}x seen)"
            if k is not None
            else f"{inflation:.2f}x"
        )
        update["basis"] = f"no TPOT given: host terms divided by the profiler's inflation {how}; {f.basis}"
    return f.model_copy(update=update)


def _rank(finding: Finding) -> tuple[float, float]:
    """Sort key: confidence-weighted expected gain of the fix alone, plus a quarter of the gain
    together with its paired finding (so a fix that pays alone goes first and its partner follows,
    and between fixes that pay only together the pairing decides), then the evidence's share."""
    gain = finding.expected_gain_share
    if finding.paired_speedup:
        gain += (1 - 1 / finding.paired_speedup) / 4
    return (finding.confidence * gain, sum(e.share for e in finding.evidence))


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of `flag` in argv (`--flag V` or `--flag=V`), "" for a bare flag, None if absent (pure)."""
    for i, arg in enumerate(argv):
        if arg == flag:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            return "" if nxt.startswith("--") else nxt
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1 :]
    return None


def launch_conflict(playbook: Playbook, kind: str, argv: list[str]) -> str | None:
    """Why the playbook's patch does not work with this launch command, or None (pure)."""
    for limit in playbook.launch_limits:
        if limit.kind != kind:
            continue
        value = flag_value(argv, limit.flag)
        if limit.refuse_when == "present" and value is not None:
            return limit.reason
        if limit.refuse_when == "absent" and value is None:
            return limit.reason
        if limit.refuse_when == "above" and value:
            try:
                if float(value) > limit.value:
                    return limit.reason
            except ValueError:
                continue
    return None
