"""Which failed sessions end as bad input (one line, exit 2): those whose first launch failed and
whose `abort` left nothing behind; a session that measured something, or whose clean-up met a
problem, keeps its summary and exit 1 (`agent/sessions/summary.py` `first_launch_failure`)."""

from __future__ import annotations

from pathlib import Path

from agent.cli.target import load_target
from agent.context import transition
from agent.sessions.summary import first_launch_failure
from state.sessions.loop import LoopOptions, LoopState
from tests.unit.test_measuring import m
from tests.unit.test_target import DEMO_TOML

EXITED = "server exited with code 3 during start-up (log /x/server-1.log): no GPU here"


def aborted(tmp_path: Path, problems: str = "", **update: object) -> LoopState:
    """A session whose launch step failed with EXITED, then `abort` ran (with `problems`, if any)."""
    error = f"launch: {EXITED}" + (f"; {problems}" if problems else "")
    steps = [
        *transition("prepare", "repo at abc"),
        *transition("launch", f"error: {EXITED}"),
        *transition("abort", error),
    ]
    return LoopState(
        session_id="s",
        target=load_target(DEMO_TOML),
        options=LoopOptions(session_dir=tmp_path, python="python3"),
        status="failed",
        error=error,
        transitions=steps,
    ).model_copy(update=update)


def test_a_first_launch_that_failed_cleanly_is_named(tmp_path: Path) -> None:
    assert first_launch_failure(aborted(tmp_path)) == EXITED


def test_a_clean_up_problem_or_anything_measured_keeps_the_failed_session(tmp_path: Path) -> None:
    assert first_launch_failure(aborted(tmp_path, "leave the session branch: x", branch="perfloop/s")) is None
    assert first_launch_failure(aborted(tmp_path, "stop server: y")) is None
    assert first_launch_failure(aborted(tmp_path, baseline=m(["a"]), launches=1)) is None
    assert first_launch_failure(aborted(tmp_path, status="interrupted")) is None
    relaunched = aborted(tmp_path)
    later = [
        *relaunched.transitions[:-2],
        *transition("relaunch", f"error: {EXITED}"),
        relaunched.transitions[-1],
    ]
    assert first_launch_failure(relaunched.model_copy(update={"transitions": later})) is None
