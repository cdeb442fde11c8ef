"""The summary's judged speedup and its interval describe one comparison, for every arms kind:
the decisive look (made by each kind's own rule on data shaped like the H200 session's: the
baseline measured alone ran faster than the reference beside the candidate) lies within its CI,
and what the CLI and the JSON print name which figure is which."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from agent.cli import render
from agent.cli.target import load_target
from agent.decision.stats.crossover import Cells, crossover_look
from agent.decision.stats.replicates import alternating_look
from agent.decision.stats.rule import look
from agent.report.headline import summary_json
from agent.report.html import environment
from agent.sessions.summary import summarize
from state.measurement.decision import DecisionConfig, Judgement, LaunchNoise, Look
from state.sessions.loop import Decision, LoopOptions, LoopState
from state.sessions.session import SessionInfo
from tests.unit.test_measuring import m
from tests.unit.test_target import DEMO_TOML

CFG = DecisionConfig(looks=1)
RNG = np.random.default_rng(7)


def noisy(mean_log: float, n: int) -> list[float]:
    return list(mean_log + RNG.normal(0.0, 0.08, n))


def decisive(arms: str) -> Look:
    """The decisive look of `arms`' own rule: the candidate ~6.8x faster than its reference."""
    ref, cand = np.log(22.0), np.log(22.0 / 6.8)
    if arms in ("sequential", "interleaved"):  # per-prompt requests' log TPOT
        reference = [np.array(noisy(ref, 20)) for _ in range(3)]
        candidate = [np.array(noisy(cand, 20)) for _ in range(3)]
        return look(reference, candidate, LaunchNoise(sigma_log=0.15), CFG, 1)
    if arms == "alternating":  # launches' locations
        return alternating_look(noisy(ref, 4), noisy(cand, 4), CFG, 1, 1)[0]
    cells: Cells = {
        (h, a): noisy(ref if a == "reference" else cand, 2)
        for h in ("a", "b")
        for a in ("reference", "candidate")
    }
    return crossover_look(cells, CFG, 1, 1)[0]  # cross-host


@pytest.mark.parametrize("arms", ["sequential", "interleaved", "alternating", "cross-host"])
def test_the_judged_speedup_lies_within_its_own_ci(tmp_path: Path, arms: str) -> None:
    lk = decisive(arms)
    j = Judgement(
        verdict="accepted", looks=[lk], launch_noise=LaunchNoise(sigma_log=0.15), min_gain=0.02,
        confidence=0.95, arms=arms,
    )  # fmt: skip
    state = LoopState(
        session_id="s",
        target=load_target(DEMO_TOML),
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1"),
        baseline=m(["a"], 17.7),  # measured alone, at the start
        reference=m(["a"], 17.7 / 5.49),  # the candidate, measured beside its reference
        decisions=[Decision(iteration=1, source="p", verdict="accepted", reason="r", judgement=j)],
    )
    s = summarize(state, "done")
    assert s.speedup_ci is not None and s.speedup_judged is not None
    assert s.speedup_ci[0] <= s.speedup_judged <= s.speedup_ci[1], (arms, s.speedup_judged, s.speedup_ci)
    assert s.speedup_judged == lk.speedup and s.speedup == pytest.approx(5.49)  # two comparisons, named
    out = io.StringIO()
    render.summary(Console(file=out, width=300, color_system=None), s)
    text = out.getvalue()
    assert "5.49x baseline -> final, not judged" in text
    low, high = s.speedup_ci
    figure = f"{lk.speedup:.2f}x [{low:.2f}, {high:.2f}]"
    # one headline: the judged figure heads the table, the unjudged ratio comes after, named
    first = text.splitlines()[1]  # the row under the title
    assert first.startswith("speedup  ") and figure in first, text
    assert text.index(figure) < text.index("baseline -> final"), text
    payload = summary_json(s)  # --json: `speedup` is the judged figure, the ratio is named apart
    assert payload["speedup"] == lk.speedup and payload["speedup_ci"] == [low, high]
    assert payload["speedup_baseline_final"] == pytest.approx(5.49)
    info = SessionInfo(
        id="s", created_at=datetime.now(UTC), target_name="t", target_path=None, repo=s.repo,
        status="done", summary=s,
    )  # fmt: skip
    out = io.StringIO()
    render.sessions(Console(file=out, width=300, color_system=None), [info], {})
    assert figure in out.getvalue() and "5.49x" not in out.getvalue()  # `perfloop sessions`
    index = render_index([info])  # the `serve` index
    assert figure in index and "5.49x" not in index, index


def test_outputs_identical_is_none_when_nothing_was_kept(tmp_path: Path) -> None:
    """A session that kept no candidate compared no outputs with the baseline's (its reference is
    the baseline itself): the summary says None, not True."""
    state = LoopState(
        session_id="s",
        target=load_target(DEMO_TOML),
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1"),
        baseline=m(["a"], 30.0),
        reference=m(["a"], 30.0),
        decisions=[Decision(iteration=1, source="p", verdict="rejected", reason="outputs changed")],
    )
    assert summarize(state, "done").outputs_identical is None
    kept = state.model_copy(
        update={"decisions": [Decision(iteration=1, source="p", verdict="accepted", reason="r")]}
    )
    assert summarize(kept, "done").outputs_identical is True


def render_index(infos: list[SessionInfo]) -> str:
    """The `perfloop serve` index page as the app renders it."""
    template = environment("agent.web").get_template("index.html.j2")
    return template.render(csrf="c", nonce="n", infos=infos, page=1, pages=1, digest="d")
