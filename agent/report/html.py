"""The session report as one self-contained HTML page: Jinja2 template, matplotlib SVG plots
inline, diffs highlighted by Pygments (CSS inline); no script, font or style is fetched."""

from __future__ import annotations

import hashlib
import shlex
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from jinja2 import ChoiceLoader, Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from agent.report import plots
from agent.report.data import ReportData
from agent.report.headline import baseline_final, best_command, headline, judged
from state.measurement.workload import OBJECTIVES
from tools.workspace.hidden import visible

Linker = Callable[[Path], str | None]
"""Where a file of the session is linked from the page (None: not reachable from here)."""

_FORMATTER = HtmlFormatter(cssclass="diff", wrapcode=True)
_DRAWN: OrderedDict[str, list[tuple[str, str, str]]] = OrderedDict()
_DRAWING = threading.Lock()
KEPT = 32  # sessions' plots kept drawn


def environment(*extra: str) -> Environment:
    """The templates of this package (and of the packages named, e.g. `agent.web`)."""
    loaders = [PackageLoader(pkg, "templates") for pkg in (*extra, "agent.report")]
    env = Environment(loader=ChoiceLoader(loaders), autoescape=select_autoescape(default=True))
    env.filters["shell"] = lambda argv: visible(shlex.join(argv))  # the exact command that runs
    env.finalize = _shown  # every stored text on a page: bidi overrides, controls as escapes
    env.filters["headline"] = headline  # a summary's one speedup: judged, with its interval
    env.filters["judged"] = judged
    env.filters["baseline_final"] = baseline_final
    env.filters["best_command"] = best_command
    return env


def _shown(value: object) -> object:
    """A value as the page shows it: text with hidden characters as escapes (tools/workspace/hidden.py)."""
    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def file_link(path: Path) -> str | None:
    """A standalone report links the files on this machine, when they are there."""
    return path.resolve().as_uri() if path.is_file() else None


def diff_html(diff: str) -> Markup:
    return Markup(highlight(visible(diff), DiffLexer(), _FORMATTER))


def context(data: ReportData, link: Linker = file_link) -> dict:
    """What the report template renders (the web app adds its own keys)."""
    figures = drawn(data)
    traces = [
        {"profile": p, "href": link(p.trace_path), "summary_href": p.summary_path and link(p.summary_path)}
        for p in data.state.profiles
    ]
    return {
        "d": data,
        "s": data.summary,
        "figures": [(fid, title, Markup(svg)) for fid, title, svg in figures],
        "traces": traces,
        "diff": diff_html,
        "pygments_css": Markup(_FORMATTER.get_style_defs(".diff")),
    }


def drawn(data: ReportData) -> list[tuple[str, str, str]]:
    """The plots of `data` as (id, title, SVG), drawn once per state of what they show (the web app
    renders a session's page on every reload: its plots come from here until the session moves).
    One draw at a time (matplotlib's font and text caches are shared); a plot that cannot be drawn
    is a one-line note in its place, so the rest of the page, the approval forms too, still renders."""
    key = hashlib.sha256(repr((data.arms, data.ops, data.spans)).encode()).hexdigest()
    with _DRAWING:
        if key in _DRAWN:
            _DRAWN.move_to_end(key)
            return _DRAWN[key]
        figures: list[tuple[str, str, Callable[[], str]]] = []
        w = data.state.target.workload
        if w is not None and any(a.objective for a in data.arms):
            name, unit, _ = OBJECTIVES[w.objective]
            title = f"{name} per measured launch, windows at concurrency {w.primary} (what the rule judged)"
            figures.append(("plot-objective", title, lambda: plots.objective_per_arm(data.arms, name, unit)))
            if len(w.levels) > 1:
                title = f"{name} per measured launch at each concurrency level ({w.primary} judged)"
                levels = (name, unit, w.primary)
                figures.append(("plot-levels", title, lambda: plots.objective_by_level(data.arms, *levels)))
        if data.arms:
            at = f" (p50 and p99 at concurrency {w.primary})" if w is not None else ""
            figures.append(
                ("plot-tpot", f"TPOT per measured launch{at}", lambda: plots.tpot_per_arm(data.arms))
            )
            figures.append(
                ("plot-dist", "TPOT and ITL distributions", lambda: plots.distributions(data.arms))
            )
        for i, change in enumerate(data.ops):
            figures.append(
                (f"plot-ops-{i + 1}", f"Top ops, {change.label}", lambda c=change: plots.top_ops(c))  # type: ignore[misc]
            )
        if data.spans:
            figures.append(
                ("plot-timeline", "Timeline of the session's steps", lambda: plots.timeline(data.spans))
            )
        out = [(fid, title, _draw(fid, draw)) for fid, title, draw in figures]
        _DRAWN[key] = out
        while len(_DRAWN) > KEPT:
            _DRAWN.popitem(last=False)
        return out


def _draw(fid: str, draw: Callable[[], str]) -> str:
    try:
        return draw()
    except Exception as exc:  # a plot is not worth the page: say so in its place
        print(f"perfloop: plot {fid} not drawn: {type(exc).__name__}: {exc}", file=sys.stderr)
        return f'<p class="plot-error">plot not drawn ({escape(type(exc).__name__)})</p>'


def render_report(data: ReportData, link: Linker = file_link) -> str:
    """The standalone report page."""
    return environment().get_template("report.html.j2").render(context(data, link))
