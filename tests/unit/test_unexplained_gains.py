"""docs/usage.md (was the README): "a gain whose op did not shrink by at least half the prediction is flagged
(`unexplained_gains` in the summary, `perfloop show`, and the next approval view)". The flag is
made where the diagnose step makes it (`mechanism_checks` on the first profile after the patch) and
read back through what the CLI prints: the summary (`--json` and the table), `perfloop show`
(`--json` and the table) and the approval view of the next proposal."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from agent.cli import render
from agent.cli.commands.show import session_view, show_json
from agent.cli.target import load_target
from agent.decision.stats.mechanism import predict
from agent.sessions.summary import summarize
from agent.steps.approval import approval_request
from agent.steps.profile import mechanism_checks
from state.config.options import LoopOptions
from state.profiling.diagnosis import Diagnosis
from state.sessions.loop import Decision, LoopState
from state.sessions.session import SessionInfo
from tests.unit.test_mechanism import profile, proposal
from tests.unit.test_target import DEMO_TOML

FLAG = "GAIN WITHOUT MECHANISM"


def after_profile(tmp_path: Path, cast_us_after: float) -> LoopState:
    """A session that accepted the cast fix at iteration 1 (with its prediction) and has just
    profiled again with `cast_us_after` of the cast left, proposing the next patch."""
    diag = Diagnosis(findings=[], top_ops=[], time_basis="cpu", steps=5, step_us=200.0)
    kept = Decision(
        iteration=1,
        source="kv",
        verdict="accepted",
        reason="r",
        prediction=predict(proposal(), diag),
    )
    state = LoopState(
        session_id="s-mech",
        target=load_target(DEMO_TOML),
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1"),
        decisions=[kept],
        iteration=2,
    )
    checked = mechanism_checks(state, profile(cast_us_after))
    assert [m.iteration for m in checked] == [1]
    return state.model_copy(
        update={"mechanisms": checked, "proposal": proposal().model_copy(update={"iteration": 2})}
    )


def printed(draw, *args) -> str:
    out = io.StringIO()
    draw(Console(file=out, width=400, color_system=None), *args)
    return out.getvalue()


@pytest.mark.parametrize(("cast_us_after", "unexplained"), [(880.0, ["kv"]), (0.0, [])])
def test_a_gain_without_its_mechanism_is_shown_in_summary_show_and_the_next_approval(
    tmp_path: Path, cast_us_after: float, unexplained: list[str]
) -> None:
    state = after_profile(tmp_path, cast_us_after)
    flagged = bool(unexplained)

    s = summarize(state, "done")
    assert s.unexplained_gains == unexplained
    assert s.model_dump(mode="json")["unexplained_gains"] == unexplained  # the `--json` line
    assert (FLAG in printed(render.summary, s)) is flagged

    info = SessionInfo(
        id=state.session_id, created_at=datetime.now(UTC), target_name="t", target_path=DEMO_TOML,
        repo=state.target.repo, status="done", summary=s,
    )  # fmt: skip
    shown = show_json(info, state, [], [])
    assert [m["confirmed"] for m in shown["mechanisms"]] == [not flagged]
    assert shown["session"]["summary"]["unexplained_gains"] == unexplained
    table = printed(session_view, info, state, [], [])
    assert (f"predicted vs realized, kv: aten::copy_ 180.0 -> {cast_us_after / 5:.1f} us/step" in table) and (
        (FLAG in table) is flagged
    ), table

    req = approval_request(state)
    assert len(req["mechanisms"]) == 1 and (FLAG in req["mechanisms"][0]) is flagged
    view = printed(render.approval, req)
    line = next(
        x for x in view.splitlines() if x.startswith("earlier accepted patch, predicted vs realized: kv:")
    )
    assert (FLAG in line) is flagged, view
