"""The summary's launch-noise line says the noise the decisions used (issue 57): a paired-blocks
search printed "launch noise 25.0% (the conservative default until 6 A/A launches; 2 so far,
measured 1.5%: too few to replace it)", the baseline's, beneath decisions judged with 1.5% pooled
over their blocks."""

from __future__ import annotations

import io
from datetime import datetime
from pathlib import Path

from rich.console import Console

from agent.cli.commands.show import session_view
from agent.decision.stats.noise import session_line
from state.measurement.decision import Judgement, LaunchNoise, Look
from state.sessions.loop import Decision
from state.sessions.session import SessionInfo
from tests.unit.test_search import state

BASELINE = LaunchNoise(
    sigma_log=0.25, estimate_log=0.015, launches=2, df=1, default_log=0.25, needed=6
)  # the baseline's: two A/A launches, too few to replace the default
POOLED = LaunchNoise(sigma_log=0.015, estimate_log=0.015, launches=4, source="pooled", df=2)


def judged(n: int, noise: LaunchNoise) -> Decision:
    look = Look(
        look=1, of=3, speedup=1.0, ci_low=0.99, ci_high=1.01, level=0.98, prompts=1,
        requests_reference=2, requests_candidate=2, verdict="rejected",
    )  # fmt: skip
    j = Judgement(verdict="rejected", looks=[look], launch_noise=noise, min_gain=0.02, confidence=0.95)
    return Decision(iteration=1, source=f"search-{n}", verdict="rejected", reason="r", judgement=j)


def test_the_line_gives_the_decisions_noise_and_the_baselines_beside_it() -> None:
    line = session_line(BASELINE, [POOLED])
    assert line is not None and line.startswith("the decisions used launch noise 1.5% (pooled over 2 df)")
    assert line.endswith("; at the baseline: 25.0% (the conservative default until 6 A/A launches; 2 so far, measured 1.5%: too few to replace it)")  # fmt: skip
    later = POOLED.model_copy(update={"sigma_log": 0.012, "df": 5})
    two = session_line(BASELINE, [POOLED, later])
    assert two is not None and two.startswith(
        "the decisions used launch noise 1.2% (pooled over 5 df) at the last of 2"
    )
    assert "(the first: 1.5% (pooled over 2 df))" in two
    # nothing judged yet: the baseline's own, as before; the same noise: said once
    assert session_line(BASELINE, []) == BASELINE.describe() and session_line(None, []) is None
    assert session_line(POOLED, [POOLED]) == "the decisions used launch noise 1.5% (pooled over 2 df)"


def test_show_prints_the_noise_the_decisions_used(tmp_path: Path) -> None:
    s = state(tmp_path, [judged(1, POOLED)]).model_copy(update={"launch_noise": BASELINE})
    info = SessionInfo(
        id="s1", created_at=datetime(2026, 12, 5), target_name="t", target_path=None, repo=tmp_path,
        status="done",
    )  # fmt: skip
    out = io.StringIO()
    session_view(Console(file=out, width=400), info, s, [], [])
    lines = [x for x in out.getvalue().splitlines() if x.startswith("the decisions used")]
    assert lines == [session_line(BASELINE, [POOLED])], out.getvalue()[-2000:]
