"""Issue 61: every place a person reads of a change that moves the math says which of exact / within
/ beyond, with figures: the approval view before a candidate runs (the policy that will judge it,
the engine's own yardstick measured at the baseline, whether the change declares itself exact, the
verdicts of the changes judged so far), the summary's output gate, `show`'s decisions and the report."""

from __future__ import annotations

import html
import io
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from agent.cli import render
from agent.cli.commands.show import session_view
from agent.cli.target import load_target
from agent.decision.gate import numerics
from agent.report.data import ProposalView, ReportData
from agent.report.html import render_report
from agent.sessions.summary import summarize
from agent.steps.approval import approval_request, batch_request
from state.measurement.numerics import NumericsNoise, NumericsVerdict
from state.sessions.loop import Decision, LoopOptions, LoopState, Proposal
from state.sessions.session import SessionInfo
from tests.unit.test_numerics_judge import side
from tests.unit.test_target import DEMO_TOML

BASE = [[-0.1 - 0.05 * j for j in range(4)] for _ in range(6)]


def shifted(at: tuple[int, int], by: float) -> list[list[float]]:
    rows = [list(r) for r in BASE]
    rows[at[0]][at[1]] += by
    return rows


NOISE = NumericsNoise(
    reference=side("alone", BASE),
    schedules=[
        side("batch of 2", shifted((0, 1), 0.536)),
        side("batch of 6", shifted((2, 0), 0.1)),
    ],
)
WITHIN = NumericsVerdict(
    verdict="within", max_dlogprob=0.298, engine_max_dlogprob=0.149, engine_schedule="batch of 2",
    mean_dlogprob=0.0081, engine_mean_dlogprob=0.0125, ratio=0.61, ratio_low=0.45,
    flips=4, prompts_beyond=1, prompts=6, false_reject=0.01, margin=1.0,
)  # fmt: skip
BEYOND = WITHIN.model_copy(
    update={
        "verdict": "beyond",
        "max_dlogprob": 1.7,
        "mean_dlogprob": 0.04,
        "ratio": 3.2,
        "prompts_beyond": 6,
    }
)
TEXTS = "outputs changed on the correctness set: 2/7 alone"


def proposal(source: str, exact: bool, launch: bool = False) -> Proposal:
    return Proposal(
        iteration=4, source=source, title=f"try {source}", explanation="why", diff="" if launch else "d",
        files=[] if launch else ["a.py"], expected_gain_share=0.1, expected_gain_ms=None, evidence=[],
        launch_argv=["bash", "launch.sh", "--enable-torch-compile"] if launch else None, exact=exact,
    )  # fmt: skip


def decision(iteration: int, source: str, verdict: str, v: NumericsVerdict) -> Decision:
    said = numerics.line(v, None if v.verdict == "exact" else TEXTS)  # the gate's note in the reason
    return Decision.model_validate(
        {"iteration": iteration, "playbook": source, "verdict": verdict, "reason": f"1.90x, {said}"}
        | {"numerics": v, "output_gate": said, "tpot_ms_before": 20.0, "tpot_ms_after": 12.0}
    )


def session(tmp_path: Path, policy: str = "numerics", noise: NumericsNoise | None = NOISE) -> LoopState:
    """Iteration 4 of a numerics session: the cast fix kept exact, a compile kept within, a third
    change refused beyond; the next proposal, a playbook that declares itself exact, waits."""
    target = load_target(DEMO_TOML)
    target = target.model_copy(
        update={"correctness": target.correctness.model_copy(update={"policy": policy})}
    )
    return LoopState(
        session_id="s-num",
        target=target,
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1"),
        numerics_noise=noise,
        decisions=[
            decision(1, "kv-cache-full-pool-cast", "accepted", NumericsVerdict(verdict="exact")),
            decision(2, "search-1", "accepted", WITHIN),
            decision(3, "search-2", "rejected", BEYOND),
        ],
        iteration=4,
        proposal=proposal("fused-rope", exact=True),
    )


def printed(draw, *args) -> str:
    out = io.StringIO()
    draw(Console(file=out, width=400, color_system=None), *args)
    return out.getvalue()


def test_the_approval_view_says_which_policy_judges_against_what_and_the_verdicts_so_far(
    tmp_path: Path,
) -> None:
    req = approval_request(session(tmp_path))
    assert req["output_gate"] == [
        "output gate: numerics policy: kept when exact or within the engine's numerics; beyond is refused",
        "will be judged against the engine's own moves (mean |dlogprob| 0.0223 a token, batch of 2; largest "
        "0.536), measured at the baseline: refused when its mean move per prompt is above 1x the engine's "
        "own at 99% confidence (false-reject 1%), or any prompt's past 4x the engine's largest",
        "fused-rope declares itself exact (its playbook says `exact = true`): only an exact verdict passes",
        "judged so far: kv-cache-full-pool-cast (kept): exact; search-1 (kept): within (mean |dlogprob| "
        "0.0081 vs 0.0125, 0.61x per prompt); search-2 (rejected): beyond (mean |dlogprob| 0.04 vs 0.0125, "
        "3.20x per prompt)",
    ]
    view = printed(render.approval, req)
    assert all(line in view for line in req["output_gate"]), view


def test_a_batch_says_for_each_candidate_whether_it_declared_itself_exact(tmp_path: Path) -> None:
    state = session(tmp_path).model_copy(
        update={
            "proposal": None,
            "candidates": [
                proposal("fused-rope", exact=True),
                proposal("search-3", exact=False, launch=True),
            ],
        }
    )
    lines = batch_request(state)["output_gate"]
    assert (
        "fused-rope declares itself exact (its playbook says `exact = true`): only an exact verdict passes"
        in lines
    )
    assert (
        "search-3 is not declared exact (a knob it sets lacks `exact = true`): exact or within passes"
        in lines
    )
    assert sum("declare" in line for line in lines) == 2, lines


def test_unmeasured_or_unmoved_numerics_and_the_other_policies_say_so(tmp_path: Path) -> None:
    unmeasured = approval_request(session(tmp_path, noise=None))["output_gate"]
    assert (
        unmeasured[1] == "will be judged against the engine's own moves, not measured yet (at the baseline)"
    )
    still = NOISE.model_copy(update={"schedules": [side("batch of 2", BASE), side("batch of 6", BASE)]})
    rounding = approval_request(session(tmp_path, noise=still))["output_gate"][1]
    assert rounding.startswith(  # the reference's top-k gap: 1/256
        "will be judged against the engine's rounding (no side of 2 moved its tokens: |dlogprob| its "
        "logits' rounding, 0.00391)"
    ), rounding
    exact = approval_request(session(tmp_path, policy="exact"))["output_gate"]
    assert exact == ["output gate: exact policy: kept only when its greedy outputs equal the baseline's"]


def test_the_summary_show_and_the_report_carry_each_class_with_its_figures(tmp_path: Path) -> None:
    state = session(tmp_path).model_copy(update={"proposal": None})
    s = summarize(state, "done")
    assert s.output_gate == (
        "numerics: exact, or within the engine's own moves (mean |dlogprob| 0.0223 a token, batch of 2; "
        "largest 0.536); kv-cache-full-pool-cast (kept): exact; search-1 (kept): within (mean |dlogprob| "
        "0.0081 vs 0.0125, 0.61x per prompt); search-2 (rejected): beyond (mean |dlogprob| 0.04 vs 0.0125, "
        "3.20x per prompt)"
    )
    within = numerics.line(WITHIN, TEXTS)
    assert within.startswith(
        "within the engine's numerics: mean |dlogprob| 0.0081 a token vs the engine's own 0.0125"
    )
    info = SessionInfo(
        id=state.session_id, created_at=datetime.now(UTC), target_name="t", target_path=DEMO_TOML,
        repo=state.target.repo, status="done", summary=s,
    )  # fmt: skip
    shown = printed(session_view, info, state, [], [])
    assert within in shown, shown  # the decision's reason, whole
    assert "search-1 (kept): within (mean |dlogprob| 0.0081 vs 0.0125, 0.61x per prompt)" in shown
    views = [ProposalView(proposal(d.source, False), decision=d) for d in state.decisions]
    data = ReportData(info, state, s, arms=[], proposals=views, ops=[], spans=[], calls=0)
    page = html.unescape(render_report(data, link=lambda _p: None))
    assert within in page and "beyond the engine's numerics: mean |dlogprob| 0.04" in page
    assert s.output_gate in page


def test_the_approval_page_of_perfloop_serve_says_it_too(tmp_path: Path) -> None:
    from agent.report.html import context, environment

    state = session(tmp_path)
    req = approval_request(state)
    info = SessionInfo(
        id=state.session_id, created_at=datetime.now(UTC), target_name="t", target_path=DEMO_TOML,
        repo=state.target.repo, status="paused",
    )  # fmt: skip
    data = ReportData(info, state, summarize(state, "paused"), [], [], [], [], 0, pending=req)
    page = (
        environment("agent.web")
        .get_template("session.html.j2")
        .render(context(data, link=lambda _p: None) | {"number": 1, "csrf": "c", "nonce": "n", "seq": 0})
    )
    said = html.unescape(page.split('<p id="output-gate">')[1].split("</p>")[0]).split("<br>")
    assert said == req["output_gate"]
