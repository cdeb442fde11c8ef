"""What a session did not measure reads as not measured: a session that kept no candidate (aborted
after its baseline, or every candidate rejected) shows the baseline's figures alone, not `X -> X
(1.00x)`, and its outputs as not compared, not `True`; `--json` keeps its fields (`tpot_ms_after`
repeats the baseline's, as recorded summaries have it, so they replay the same) and says
`outputs_identical: null`."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from agent.cli import render
from agent.cli.target import load_target
from agent.report.headline import summary_json
from agent.sessions.summary import summarize
from state.sessions.loop import Decision, LoopOptions, LoopState
from state.sessions.session import SessionInfo, Summary
from tests.unit.test_measuring import m
from tests.unit.test_target import DEMO_TOML


def state(tmp_path: Path, **update: object) -> LoopState:
    return LoopState(
        session_id="s",
        target=load_target(DEMO_TOML),
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1"),
    ).model_copy(update=update)


def rows(s: Summary) -> dict[str, str]:
    """The summary table as printed, row name -> its text (wrapped rows joined)."""
    out = io.StringIO()
    render.summary(Console(file=out, width=400, color_system=None), s)
    table: dict[str, str] = {}
    last = ""
    for line in out.getvalue().splitlines()[1:]:  # under the title: `key  value`, continued indented
        if line.startswith(("best configuration", "next: ")):
            break
        key, _, value = line.partition("  ") if not line.startswith(" ") else ("", "", line)
        last = key.strip() or last
        table[last] = (table.get(last, "") + " " + value.strip()).strip()
    return table


def test_a_session_aborted_after_its_baseline_shows_the_baseline_alone(tmp_path: Path) -> None:
    base = m(["a"], 12.3)
    s = summarize(state(tmp_path, baseline=base, reference=base, stop_reason="aborted: profile: x"), "failed")
    assert s.tpot_ms_after == s.tpot_ms_before and s.outputs_identical is None  # the JSON, as recorded
    shown = rows(s)
    assert shown["TPOT"] == "12.3 ms (baseline; no candidate measured)", shown
    assert shown["TTFT"] == "5.0 ms (baseline; no candidate measured)", shown
    assert shown["outputs"] == "not compared (no candidate accepted)", shown
    assert "1.00x" not in str(shown) and "True" not in str(shown) and "None" not in str(shown)


def test_a_session_that_rejected_every_candidate_says_none_was_accepted(tmp_path: Path) -> None:
    base = m(["a"], 30.0)
    rejected = Decision(iteration=1, source="p", verdict="rejected", reason="not faster")
    s = summarize(state(tmp_path, baseline=base, reference=base, decisions=[rejected]), "done")
    shown = rows(s)
    assert shown["TPOT"] == "30.0 ms (baseline; no candidate accepted)", shown
    assert shown["speedup"].startswith("none kept"), shown  # nothing kept reads so, never 1.00x
    assert summary_json(s)["speedup"] is None and summary_json(s)["speedup_baseline_final"] is None
    assert shown["outputs"] == "not compared (no candidate accepted)", shown
    info = SessionInfo(
        id="s", created_at=datetime.now(UTC), target_name="t", target_path=None, repo=s.repo,
        status="done", summary=s,
    )  # fmt: skip
    out = io.StringIO()
    render.sessions(Console(file=out, width=300, color_system=None), [info], {})
    assert "1.00x" not in out.getvalue()  # `perfloop sessions`: no speedup where none was kept


def test_a_session_that_failed_before_its_baseline_shows_nothing_measured(tmp_path: Path) -> None:
    shown = rows(summarize(state(tmp_path, stop_reason="aborted: launch: x"), "failed"))
    assert shown["TPOT"] == shown["TTFT"] == "not measured", shown
    assert shown["speedup"] == "not measured (no baseline)", shown
    assert shown["outputs"] == "not compared (no candidate accepted)", shown


def test_a_kept_candidate_still_shows_before_after_and_identical_outputs(tmp_path: Path) -> None:
    kept = Decision(iteration=1, source="p", verdict="accepted", reason="r")
    s = summarize(
        state(tmp_path, baseline=m(["a"], 30.0), reference=m(["a"], 10.0), decisions=[kept]), "done"
    )
    shown = rows(s)
    assert shown["TPOT"] == "30.0 ms -> 10.0 ms (3.00x baseline -> final, not judged)", shown
    assert shown["outputs"] == "identical to the baseline's", shown


def test_outputs_under_dummy_weights_say_the_exact_gate_is_blind(tmp_path: Path) -> None:
    """vLLM's `--load-format dummy` gives every prompt the same greedy output: "identical" says nothing."""
    kept = Decision(iteration=1, source="p", verdict="accepted", reason="r")
    s = summarize(
        state(tmp_path, baseline=m(["a"], 30.0), reference=m(["a"], 10.0), decisions=[kept]), "done"
    )
    dummy = s.model_copy(
        update={"launch_argv": ["vllm", "serve", "m", "--load-format", "dummy", "--port", "{port}"]}
    )
    assert rows(dummy)["outputs"].startswith("identical to the baseline's (blind here: --load-format dummy")
    assert rows(s)["outputs"] == "identical to the baseline's"
