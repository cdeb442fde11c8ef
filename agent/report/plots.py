"""The report's plots, drawn by matplotlib as inline SVG (text kept as text: small and searchable).

Math text is off (`text.parse_math`): labels are op names, playbook ids and paths, and a `$` in one
(`kernel$x$`) would otherwise be read as TeX, and a bad one makes `savefig` raise. Figures are made
without pyplot (no global figure registry), so pages of the web app may draw at once."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from agent.report.data import Arm, OpsChange, Span
from state.profiling.profile import ProfileSummary

COLORS = {
    "baseline": "#4c72b0",
    "accepted": "#55a868",
    "rejected": "#c44e52",
    "regression": "#8c1c13",
    "inconclusive": "#dd8452",
    "failed": "#7f7f7f",
    "measuring": "#8172b3",
    "reference": "#64b5cd",
    "aa": "#937860",
}
TOP_OPS = 8

matplotlib.rcParams.update(
    {"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": "perfloop", "text.parse_math": False}
)


@contextmanager
def _figure(width: float, height: float) -> Iterator[tuple[Figure, list[str]]]:
    fig = Figure(figsize=(width, height))
    out: list[str] = []
    yield fig, out
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    out.append(text[text.index("<svg") :])


def _log_y(ax: Axes) -> None:
    """A log y axis labelled in plain text (its default labels are math text: `10^2`)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(base=10))
    ax.yaxis.set_minor_formatter(LogFormatter(base=10, labelOnlyBase=False))


def tpot_per_arm(arms: list[Arm]) -> str:
    """Median TPOT of each arm with its bootstrap CI as error bars, coloured by verdict; under
    `[workload]` its p99 at the concurrency too (a hollow marker)."""
    with _figure(7, 3.2) as (fig, out):
        ax = fig.add_subplot()
        xs = list(range(len(arms)))
        for x, a in zip(xs, arms, strict=True):
            err = [[a.median_ms - a.ci_ms[0]], [a.ci_ms[1] - a.median_ms]]
            ax.errorbar([x], [a.median_ms], yerr=err, fmt="o", capsize=6, color=COLORS.get(a.verdict, "k"))
            ax.annotate(f"{a.median_ms:.1f} ms", (x, a.median_ms), textcoords="offset points", xytext=(8, 0))
            if a.beside is not None and a.beside.tpot_ms:  # bench_serving on the same launch
                _beside(ax, x, a.beside.median_ms, a.beside.ci_ms, f"{a.beside.median_ms:.1f} ms")
            if a.tpot_p99_ms is not None:
                ax.plot([x], [a.tpot_p99_ms], "^", mfc="none", color=COLORS.get(a.verdict, "k"))
                ax.annotate(
                    f"p99 {a.tpot_p99_ms:.1f} ms",
                    (x, a.tpot_p99_ms),
                    textcoords="offset points",
                    xytext=(8, 0),
                )
        ax.set_xticks(xs, [f"{a.label}\n({a.verdict})" for a in arms])
        ax.set_xlim(-0.5, len(arms) - 0.5)
        _log_y(ax)
        p99 = any(a.tpot_p99_ms is not None for a in arms)
        ax.set_ylabel("TPOT, ms (p50 with 95% CI" + (", p99 ^)" if p99 else ")"))
        ax.grid(axis="y", alpha=0.3)
    return out[0]


def objective_by_level(arms: list[Arm], name: str, unit: str, primary: int) -> str:
    """`[workload]` with several concurrency levels: each arm's median objective over its windows
    at every level, with its bootstrap CI, one marker and line per level (the primary judged, a
    regression at any other rejects)."""
    levels = [primary, *sorted({c for a in arms for c in a.levels})]
    with _figure(7, 3.4) as (fig, out):
        ax = fig.add_subplot()
        xs = list(range(len(arms)))
        for i, c in enumerate(levels):
            shift = (i - (len(levels) - 1) / 2) * 0.12
            at = [(x, a if c == primary else a.levels.get(c)) for x, a in zip(xs, arms, strict=True)]
            pts = [(x + shift, b) for x, b in at if b is not None and b.objective]
            if not pts:
                continue
            ys = [b.objective_median for _, b in pts]
            err = [[y - b.objective_ci[0] for y, (_, b) in zip(ys, pts, strict=True)],
                   [b.objective_ci[1] - y for y, (_, b) in zip(ys, pts, strict=True)]]  # fmt: skip
            label = f"concurrency {c}" + (" (judged)" if c == primary else "")
            ax.errorbar([x for x, _ in pts], ys, yerr=err, fmt="os^vD"[i % 5] + "-", capsize=4, label=label)
        ax.set_xticks(xs, [f"{a.label}\n({a.verdict})" for a in arms])
        ax.set_xlim(-0.5, len(arms) - 0.5)
        _log_y(ax)
        ax.set_ylabel(f"{name}, {unit}\n(median of windows, 95% CI)")
        ax.legend(loc="best")
        ax.grid(axis="y", alpha=0.3)
    return out[0]


def _beside(ax: Axes, x: int, median: float, ci: tuple[float, float], label: str) -> None:
    """Another client's figure of an arm's launch (`beside`): a hollow grey square right of it."""
    err = [[median - ci[0]], [ci[1] - median]]
    ax.errorbar([x + 0.25], [median], yerr=err, fmt="s", mfc="none", capsize=4, color="#7f7f7f")
    ax.annotate(f"bench_serving {label}", (x + 0.25, median), textcoords="offset points", xytext=(6, -10))


def objective_per_arm(arms: list[Arm], name: str, unit: str) -> str:
    """`[workload]`: each arm's windows' objective (dots: the rule's units of evidence) and their
    median with its bootstrap CI as error bars, coloured by verdict; where bench_serving measured
    the same launch too (`use = "both"`), its median and CI beside (grey, not judged)."""
    with _figure(7, 3.2) as (fig, out):
        ax = fig.add_subplot()
        xs = list(range(len(arms)))
        for x, a in zip(xs, arms, strict=True):
            if not a.objective:
                continue
            color = COLORS.get(a.verdict, "k")
            ax.plot([x - 0.15] * len(a.objective), a.objective, ".", color=color, alpha=0.5)
            lo, hi = a.objective_ci
            err = [[a.objective_median - lo], [hi - a.objective_median]]
            ax.errorbar([x], [a.objective_median], yerr=err, fmt="o", capsize=6, color=color)
            label = f"{a.objective_median:.1f} {unit}"
            ax.annotate(label, (x, a.objective_median), textcoords="offset points", xytext=(8, 0))
            if a.beside is not None and a.beside.objective:  # bench_serving on the same launch
                b = a.beside
                _beside(ax, x, b.objective_median, b.objective_ci, f"{b.objective_median:.1f} {unit}")
        ax.set_xticks(xs, [f"{a.label}\n({a.verdict})" for a in arms])
        ax.set_xlim(-0.5, len(arms) - 0.5)
        ax.set_ylabel(f"{name}, {unit}\n(windows; median, 95% CI)")
        ax.grid(axis="y", alpha=0.3)
    return out[0]


def distributions(arms: list[Arm]) -> str:
    """Per-request TPOT and per-token ITL of every arm, as box plots on a log scale."""
    with _figure(9, 3.4) as (fig, out):
        for i, (title, values) in enumerate(
            (
                ("per-request TPOT", [a.tpot_ms for a in arms]),
                ("inter-token latency", [a.itl_ms for a in arms]),
            )
        ):
            ax = fig.add_subplot(1, 2, i + 1)
            box = ax.boxplot(values, patch_artist=True, showfliers=True)
            for patch, a in zip(box["boxes"], arms, strict=True):
                patch.set_facecolor(COLORS.get(a.verdict, "#cccccc"))
                patch.set_alpha(0.6)
            ax.set_xticks(range(1, len(arms) + 1), [a.label for a in arms], rotation=10)
            _log_y(ax)
            ax.set_ylabel("ms")
            ax.set_title(f"{title} (n = {', '.join(str(len(v)) for v in values)})")
            ax.grid(axis="y", alpha=0.3)
    return out[0]


def _per_step_ms(p: ProfileSummary) -> dict[str, float]:
    times: dict[str, float] = {}
    for op in p.ops:
        times[op.name] = times.get(op.name, 0.0) + op.self_us / p.steps / 1000
    return times


def top_ops(change: OpsChange) -> str:
    """Self time per decode step of the top ops, in the profile before the patch and the one after."""
    before = _per_step_ms(change.before)
    after = _per_step_ms(change.after) if change.after else {}
    names = sorted(set(before) | set(after), key=lambda n: -max(before.get(n, 0), after.get(n, 0)))[:TOP_OPS]
    basis = "device" if change.before.time_basis == "device" else "CPU"
    with _figure(7, 0.45 * len(names) + 1.2) as (fig, out):
        ax = fig.add_subplot()
        ys = range(len(names))
        ax.barh(
            [y - 0.2 for y in ys], [before.get(n, 0) for n in names], 0.4, label="before", color="#4c72b0"
        )
        if change.after:
            ax.barh(
                [y + 0.2 for y in ys], [after.get(n, 0) for n in names], 0.4, label="after", color="#55a868"
            )
        ax.set_yticks(list(ys), names)
        ax.invert_yaxis()
        ax.set_xlabel(f"{basis} self time per decode step, ms")
        ax.set_title(
            f"top ops before / after {change.label}" + ("" if change.after else " (no later profile)")
        )
        ax.legend(loc="lower right")
        ax.grid(axis="x", alpha=0.3)
    return out[0]


def timeline(spans: list[Span]) -> str:
    """Each node's stretch of tool calls on a time axis (seconds since the first call)."""
    nodes = list(dict.fromkeys(s.node for s in spans))
    t0 = spans[0].start if spans else None
    with _figure(9, 0.3 * len(nodes) + 1.2) as (fig, out):
        ax = fig.add_subplot()
        for s in spans:
            assert t0 is not None
            x = (s.start - t0).total_seconds()
            width = max((s.end - s.start).total_seconds(), 0.05)
            ax.broken_barh([(x, width)], (nodes.index(s.node) - 0.4, 0.8), color="#4c72b0")
        ax.set_yticks(range(len(nodes)), nodes)
        ax.invert_yaxis()
        ax.set_xlabel("seconds since the session's first tool call")
        ax.grid(axis="x", alpha=0.3)
    return out[0]
