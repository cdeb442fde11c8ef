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
from state.session import SessionInfo

RECORDING = Path(__file__).resolve().parents[1] / "data" / "sessions" / "demo-session.json.gz"


def test_the_summary_prints_the_launch_command_shell_quoted() -> None:
    with gzip.open(RECORDING) as f:
        info = SessionInfo.model_validate(json.loads(f.read())["session"])
    assert info.summary is not None
    argv = [*info.summary.launch_argv, "--server-args", "--chunked-prefill-size 4096", "[x]"]
    out = io.StringIO()
    render.summary(
        Console(file=out, width=400, color_system=None), info.summary.model_copy(update={"launch_argv": argv})
    )
    line = next(x for x in out.getvalue().splitlines() if "launch command" in x)
    assert shlex.join(argv) in line and shlex.split(shlex.join(argv)) == argv


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
