"""`perfloop analyze | diagnose | diff`: read profiler traces without running the loop.

Each takes trace files or directories (one trace per rank, or key_averages `.txt` tables).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.cli import terminal
from agent.cli.commands.ranks import bounds_line, print_ranks, rank_doc
from agent.cli.output import console, emit
from agent.cli.running import run_command
from tools.errors import ToolError

if TYPE_CHECKING:  # the trace readers (numpy) load when a command reads a trace, not at start-up
    from state.profiling.diagnosis import Diagnosis
    from state.profiling.profile import ProfileDiff, ProfileSummary

DEFAULT_ACTIVE_TOKENS = 1024
"""Default tokens live in the KV cache while profiling: a short chat's prompt and answer (a few
hundred to a thousand tokens) for one request. The pool-cast signature asks for a pool at least 8x
that, so only a pool far larger than one chat (>= 8192 slots) is flagged. Pass --active-tokens
with the real number (prompt + generated tokens, summed over the requests in flight)."""

Traces = Annotated[
    list[Path],
    typer.Argument(
        help="Trace files (.json, .json.gz), key_averages .txt tables, or directories of them (one per rank)."
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Top = Annotated[int, typer.Option(min=1, help="Rows to show.")]
Steps = Annotated[int | None, typer.Option(min=1, help="Decode steps in the trace (default: counted).")]


def analysis_json(profile: ProfileSummary, by: str, top: int) -> dict:
    """The `analyze --json` document: totals, then rows sorted by time (ops or kernels)."""
    device = profile.time_basis == "device"
    if by == "kernel":
        rows = [
            {
                "name": k.name,
                "share": k.share,
                "self_device_us": k.device_us,
                "calls": k.calls,
                "graph_calls": k.graph_calls,
                "input_dims": [],
            }
            for k in profile.kernels[:top]
        ]
    else:
        rows = [
            {
                "name": op.name,
                "share": op.share,
                "self_device_us": op.self_us if device else 0.0,
                "self_us": op.self_us,
                "total_us": op.total_us,
                "calls": op.calls,
                "input_dims": op.input_dims,
                "input_types": op.input_types,
                "location": op.location,
            }
            for op in profile.ops[:top]
        ]
    total_device = (
        (sum(k.device_us for k in profile.kernels) if by == "kernel" else profile.total_self_us)
        if device
        else 0.0
    )
    return {
        "source": profile.source,
        "time_basis": profile.time_basis,
        "device_name": profile.device_name,
        "by": by,
        "steps": profile.steps,
        "total_device_us": total_device,
        "total_self_us": profile.total_self_us,
        "step_us": profile.step_us,
        "step_wall_us": profile.step_wall_us,
        "ops": rows,
        "device_activity": profile.device_activity.model_dump() if profile.device_activity else None,
        "syncs": [s.model_dump() for s in profile.syncs],
        "steps_detail": [s.model_dump() for s in profile.step_stats],
        "step_source": profile.step_source,
        "step_bounds": profile.step_bounds.model_dump() if profile.step_bounds else None,
        "ranks": [r.model_dump() for r in profile.ranks],
    }


def analyze(
    traces: Traces,
    as_json: Json = False,
    top: Top = 20,
    steps: Steps = None,
    by: Annotated[str, typer.Option(help="op: rows per operator and dims; kernel: per GPU kernel.")] = "op",
) -> None:
    """Time per operator (or kernel), device idle, syncs and steps of profiler traces."""

    def body() -> None:
        from tools.trace import read_ranks
        from tools.trace.ranks.merge import merge_summaries

        if by not in ("op", "kernel"):
            raise ToolError(f"--by must be op or kernel, not {by!r}")
        ranks = read_ranks(traces, steps)
        profile = merge_summaries(ranks)
        doc = analysis_json(profile, by, top) | rank_doc(
            ranks, [analysis_json(r, by, top)["ops"] for r in ranks]
        )
        if as_json:
            emit(doc)
        else:
            _print_analysis(console(), doc, profile)
            print_ranks(console(), doc)

    run_command(body)


def diagnose(
    traces: Traces,
    as_json: Json = False,
    steps: Steps = None,
    active_tokens: Annotated[
        int,
        typer.Option(
            min=1, help="Tokens live in the KV cache while profiling (prompt + generated, all requests)."
        ),
    ] = DEFAULT_ACTIVE_TOKENS,
    tpot_ms: Annotated[float | None, typer.Option(help="Baseline TPOT in ms (gains in ms).")] = None,
    target_kind: Annotated[str, typer.Option(help="Target kind, for which patches exist.")] = "sglang",
    sglang_version: Annotated[str | None, typer.Option(help="The target's SGLang release (patches).")] = None,
    bandwidth_gbs: Annotated[
        float | None,
        typer.Option(help="Memory bandwidth for roofline lines, GB/s (default: by GPU name; CPU: measured)."),
    ] = None,
    playbooks: Annotated[list[Path] | None, typer.Option("--playbooks", help="Extra playbook dir.")] = None,
) -> None:
    """Match the playbooks against profiler traces: ranked findings with evidence and gains."""

    if playbooks is None:
        playbooks = []

    def body() -> None:
        from playbooks.engine import diagnose as run_diagnosis
        from playbooks.engine import load_playbooks
        from state.profiling.diagnosis import DiagnosisContext
        from tools.trace import read_profiles
        from tools.trace.compare.bandwidth import measure_copy_bandwidth_gbs

        profile = read_profiles(traces, steps)
        source = "flag"
        bw = bandwidth_gbs
        if bw is None and profile.time_basis == "cpu":
            bw, source = measure_copy_bandwidth_gbs(), "measured host copy"
        ctx = DiagnosisContext(
            target_kind=target_kind,
            sglang_version=sglang_version,
            active_tokens=active_tokens,
            tpot_ms=tpot_ms,
            bandwidth_gbs=bw,
            bandwidth_source=source,
        )
        result = run_diagnosis(profile, ctx, load_playbooks(playbooks))
        if as_json:
            emit({"source": profile.source, **result.model_dump(mode="json")})
        else:
            _print_diagnosis(console(), result)

    run_command(body)


def diff(
    before: Annotated[Path, typer.Argument(help="Trace (or directory) before the change.")],
    after: Annotated[Path, typer.Argument(help="Trace (or directory) after the change.")],
    as_json: Json = False,
    top: Top = 20,
) -> None:
    """Which operator groups grew, shrank, appeared or vanished between two profiles (per step)."""

    def body() -> None:
        from tools.trace import read_profiles
        from tools.trace.compare.diff import diff_profiles

        result = diff_profiles(read_profiles([before]), read_profiles([after]))
        result = result.model_copy(update={"ops": result.ops[:top]})
        if as_json:
            emit(result.model_dump(mode="json"))
        else:
            _print_diff(console(), result)

    run_command(body)


def _print_analysis(console: Console, doc: dict, profile: ProfileSummary) -> None:
    """A table of the rows, then the device and sync lines."""
    unit = "device" if doc["time_basis"] == "device" else "cpu"
    table = Table(
        title=f"{doc['source']}: {doc['steps']} steps, {doc['step_us'] / 1e3:.3f} ms {unit} time per step"
    )
    for col in ("share", f"self {unit} ms/step", "calls", "name", "input dims"):
        table.add_column(col, overflow="fold")
    for row in doc["ops"]:
        us = row["self_device_us"] if unit == "device" else row["self_us"]
        table.add_row(
            f"{row['share']:.1%}",
            f"{us / doc['steps'] / 1e3:.3f}",
            str(row["calls"]),
            Text(row["name"][:100]),  # op names and dims as written: `[65536, 1, 576]` is not markup
            Text(str(row["input_dims"])),
        )
    console.print(table)
    act = profile.device_activity
    if act is not None:
        console.print(
            f"device idle {act.idle_share:.0%} of its span over {act.gaps} gaps; median kernel "
            f"{act.median_kernel_us:.1f} us; launch-bound: {'yes' if act.launch_bound else 'no'}"
        )
    console.print(bounds_line(profile), highlight=False)
    for s in profile.syncs[:5]:
        console.print(
            f"sync {s.name} from {s.caller}: {s.calls} calls ({s.decode_calls} in decode), "
            f"{s.host_us / 1e3:.3f} ms on the host"
        )


def _print_diagnosis(console: Console, result: Diagnosis) -> None:
    """Each finding with its gain, evidence and roofline line."""
    console.print(f"steps: {result.step_source or 'unknown (no marker, nothing repeats)'}", highlight=False)
    for n, f in enumerate(result.findings, 1):
        gain = (
            f"{f.expected_gain_ms:.1f} ms"
            if f.expected_gain_ms is not None
            else f"{f.expected_gain_share:.0%}"
        )
        console.print(
            terminal.styled(
                (f"{n}. {f.playbook}", "bold"),
                f" (confidence {f.confidence:.0%}, expected gain {gain}): {f.title}",
            ),
            highlight=False,
        )
        if f.patch_note:
            console.print(f"   {f.decode_path}: {f.patch_note}", highlight=False, soft_wrap=True)
        if f.predicted_step_ms is not None:
            bound = f"; bound: {f.bound} -> {f.bound_after}" if f.bound_after else ""
            spread = (
                f", {f.predicted_speedup_low:.2f}-{f.predicted_speedup_high:.2f}x over the step windows"
                if f.predicted_speedup_low is not None and f.predicted_speedup_high is not None
                else ""
            )
            console.print(
                f"   predicted step {f.step_ms:.3f} -> {f.predicted_step_ms:.3f} ms "
                f"({f.predicted_speedup:.2f}x{spread}){bound}",
                highlight=False,
            )
        elif f.basis and f.basis.startswith("unknown"):
            console.print("   predicted step: unknown", highlight=False)
        if f.paired_with:
            console.print(
                f"   with {f.paired_with}: {f.paired_speedup:.2f}x predicted together", highlight=False
            )
        if f.basis:
            console.print(f"   basis: {f.basis}", highlight=False, soft_wrap=True)
        for e in f.evidence:
            console.print(f"   - {e.note}", highlight=False, soft_wrap=True)
        if f.roofline is not None:
            console.print(f"   roofline: {f.roofline.line}", highlight=False, soft_wrap=True)


def _print_diff(console: Console, result: ProfileDiff) -> None:
    """One row per changed group."""
    table = Table(
        title=f"{result.before} -> {result.after}: {result.before_step_us / 1e3:.3f} -> "
        f"{result.after_step_us / 1e3:.3f} ms per step ({result.time_basis})"
    )
    for col in ("status", "before ms/step", "after ms/step", "name", "input dims"):
        table.add_column(col, overflow="fold")
    for r in result.ops:
        table.add_row(
            r.status,
            f"{r.before_us_per_step / 1e3:.3f}",
            f"{r.after_us_per_step / 1e3:.3f}",
            Text(r.name[:100]),
            Text(str(r.input_dims)),
        )
    console.print(table)
    if result.note:
        console.print(f"note: {result.note}")


COMMANDS = {"analyze": analyze, "diagnose": diagnose, "diff": diff}
