"""The session report as one self-contained HTML page: Jinja2 template, matplotlib SVG plots
inline, diffs highlighted by Pygments (CSS inline); no script, font or style is fetched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from jinja2 import ChoiceLoader, Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from agent.report import plots
from agent.report.data import ReportData

Linker = Callable[[Path], str | None]
"""Where a file of the session is linked from the page (None: not reachable from here)."""

_FORMATTER = HtmlFormatter(cssclass="diff", wrapcode=True)


def environment(*extra: str) -> Environment:
    """The templates of this package (and of the packages named, e.g. `agent.web`)."""
    loaders = [PackageLoader(pkg, "templates") for pkg in (*extra, "agent.report")]
    return Environment(loader=ChoiceLoader(loaders), autoescape=select_autoescape(default=True))


def file_link(path: Path) -> str | None:
    """A standalone report links the files on this machine, when they are there."""
    return path.resolve().as_uri() if path.is_file() else None


def diff_html(diff: str) -> Markup:
    return Markup(highlight(diff, DiffLexer(), _FORMATTER))


def context(data: ReportData, link: Linker = file_link) -> dict:
    """What the report template renders (the web app adds its own keys)."""
    figures = []
    if data.arms:
        figures.append(("plot-tpot", "TPOT per measured launch", plots.tpot_per_arm(data.arms)))
        figures.append(("plot-dist", "TPOT and ITL distributions", plots.distributions(data.arms)))
    for i, change in enumerate(data.ops):
        figures.append((f"plot-ops-{i + 1}", f"Top ops, {change.label}", plots.top_ops(change)))
    if data.spans:
        figures.append(("plot-timeline", "Timeline of the session's steps", plots.timeline(data.spans)))
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


def render_report(data: ReportData, link: Linker = file_link) -> str:
    """The standalone report page."""
    return environment().get_template("report.html.j2").render(context(data, link))
