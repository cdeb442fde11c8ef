"""Text a person copies: the launch command printed shell-quoted (an argument with a space or a
`$` pastes back as one argument), stored text printed as written (no markup read in it)."""

from __future__ import annotations

import gzip
import io
import json
import shlex
from pathlib import Path

from rich.console import Console

from agent.cli import render
from agent.report.headline import summary_json
from state.sessions.session import SessionInfo

RECORDING = Path(__file__).resolve().parents[1] / "data" / "sessions" / "demo-session.json.gz"


def test_the_summary_prints_the_best_configuration_whole_and_shell_quoted() -> None:
    """The best configuration to copy: shell-quoted, whole at 80 columns (once cut with "…" by the
    table; now broken with ` \\` continuations, no line wider than 80, so that it pastes as it is),
    without perfloop's own profiling flags and without `'{port}'`; `--json` carries it."""
    with gzip.open(RECORDING) as f:
        info = SessionInfo.model_validate(json.loads(f.read())["session"])
    assert info.summary is not None
    own = ["--profiler-config.profiler=torch", "--profiler-config.torch_profiler_dir", "/tmp/t"]
    base = ["bash", "launch.sh", "--port", "{port}", "--preset", "cpu", "--max-running-requests", "8"]
    argv = [*base, *own, "--server-args", "--chunked-prefill-size 4096", "[x]"]
    s = info.summary.model_copy(update={"launch_argv": argv})
    assert s.accepted
    out = io.StringIO()
    render.summary(Console(file=out, width=80, color_system=None), s)
    lines = out.getvalue().splitlines()
    block = lines[lines.index("best configuration, to copy:") + 1 : -2]
    assert len(block) > 1 and all(len(line) <= 80 for line in lines), lines
    command = "\n".join(block).replace(" \\\n", " ").strip()  # what a shell reads of the pasted lines
    expected = [a.replace("{port}", "8000") for a in argv if a not in own]
    assert shlex.split(command) == expected, command
    assert "…" not in command and "{port}" not in out.getvalue() and "profiler-config" not in out.getvalue()
    assert shlex.split(summary_json(s)["best_command"]) == expected
    assert lines[-2:] == [
        f"next: perfloop show {s.session}",
        f"      perfloop report {s.session} -o report.html",
    ]


def test_analyze_and_diff_speak_ms_per_step() -> None:
    """One unit per quantity: `analyze` and `diff` both in ms per step (diff once said us/step)."""
    from typer.testing import CliRunner

    from agent.cli import app

    traces = Path(__file__).resolve().parents[1] / "data" / "traces"
    before, after = (str(traces / f"{n}_cuda.json.gz") for n in ("full_pool_cast", "gather_then_cast"))
    diff = CliRunner().invoke(app, ["diff", before, after], env={"COLUMNS": "200"})
    assert diff.exit_code == 0 and "before ms/step" in diff.output and "us/step" not in diff.output
    assert "0.463" in diff.output  # the full-pool cast: 463 us per step before, gone after
    analyze = CliRunner().invoke(app, ["analyze", before], env={"COLUMNS": "200"})
    assert analyze.exit_code == 0 and "ms/step" in analyze.output and "us/step" not in analyze.output
