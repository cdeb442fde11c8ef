"""`perfloop analyze` on several trace files (one per tensor-parallel rank): each rank's own table,
its wait in collectives, and the slowest rank, beside the merged table; and the bounds line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # the trace readers (numpy) load when a command reads a trace
    from state.profiling.profile import ProfileSummary

RANK_TOP = 3
"""Rows of each rank's own table printed (the JSON holds --top of them)."""


def rank_doc(summaries: Sequence[ProfileSummary], rows: list[list[dict]]) -> dict:
    """The per-rank part of `analyze --json` for two or more files: `rank_tables` (each rank's
    source, step time, time in collectives and wait in them per step, and its own rows) and
    `slowest_rank` (the rank the others wait for); empty for one file."""
    if len(summaries) < 2:
        return {}
    from tools.trace.ranks.collectives import rank_waits

    waits, work, slowest = rank_waits(summaries)
    tables = [
        {
            "rank": n,
            "source": s.source,
            "steps": s.steps,
            "step_us": s.step_us,
            "work_us_per_step": work[n],
            "collective_wait_us_per_step": waits[n],
            "ops": rows[n],
        }
        for n, s in enumerate(summaries)
    ]
    slow = tables[slowest]
    return {
        "rank_tables": tables,
        "slowest_rank": {
            "rank": slowest,
            "source": slow["source"],
            "work_us_per_step": slow["work_us_per_step"],
            "others_wait_us_per_step": max(waits),
        },
    }


def print_ranks(console: Console, doc: dict) -> None:
    """One row per rank (its top rows, time outside and waiting in collectives), then the slowest."""
    if not doc.get("rank_tables"):
        return
    unit = "device" if doc["time_basis"] == "device" else "cpu"
    table = Table(title=f"per rank: {len(doc['rank_tables'])} files")
    for col in ("rank", "file", f"{unit} ms/step", "outside collectives", "collective wait", "top rows"):
        table.add_column(col, overflow="ellipsis", no_wrap=col == "top rows")
    for r in doc["rank_tables"]:
        tops = "\n".join(f"{row['share']:.1%} {row['name'][:48]}" for row in r["ops"][:RANK_TOP])
        table.add_row(
            str(r["rank"]),
            Text(Path(r["source"]).name),
            f"{r['step_us'] / 1e3:.3f}",
            f"{r['work_us_per_step'] / 1e3:.3f}",
            f"{r['collective_wait_us_per_step'] / 1e3:.3f}",
            Text(tops),
        )
    console.print(table)
    slow = doc["slowest_rank"]
    console.print(
        f"slowest rank: {slow['rank']} ({slow['source']}): {slow['work_us_per_step'] / 1e3:.3f} ms per step "
        f"outside collectives; the others wait up to {slow['others_wait_us_per_step'] / 1e3:.3f} ms per "
        "step for it in collectives",
        highlight=False,
        soft_wrap=True,
    )


def bounds_line(profile: ProfileSummary) -> str:
    """How the steps were found and what bounds them (each rank's when several)."""
    out = f"steps: {profile.step_source or 'unknown (no marker, nothing repeats)'}"
    rows = [(r.source, r.step_bounds) for r in profile.ranks] or [("", profile.step_bounds)]
    for source, b in rows:
        where = f"{source}: " if source else ""
        if b is None:
            out += f"\n{where}bound unknown (no step windows with kernels)"
        else:
            out += (
                f"\n{where}bound {b.bound}: host issues a step's {b.kernels:.0f} kernels in "
                f"{b.issue_us / 1000:.3f} ms, device busy {b.device_us / 1000:.3f} ms, step "
                f"{b.wall_us / 1000:.3f} ms (medians over {b.steps} {b.windows} windows)"
            )
    return out
