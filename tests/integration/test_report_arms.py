"""The report and the page show every measured arm, whatever the arms kind: the interleaved H200
session (benchmarks/h200-2026-11-30-interleaved: its candidates measured by `bench.measure_pair`
beside a reference launch) shows each candidate with its own figures and its reference arm."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.report.data import gather
from agent.report.html import render_report
from agent.sessions.archive import import_session
from agent.sessions.runner import Sessions

RECORDING = Path(__file__).resolve().parents[2] / "benchmarks/h200-2026-11-30-interleaved"


def test_interleaved_arms_show_each_candidate_and_its_reference(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path))
    sessions = Sessions()
    sid = import_session(sessions.store, RECORDING / "interleaved-session.json.gz")
    data = gather(sessions, sid)
    shown = [(a.label, a.verdict, len(a.tpot_ms)) for a in data.arms]
    assert shown == [
        ("baseline", "baseline", 9),
        ("kv-cache-full-pool-cast", "accepted", 9),  # measured by bench.measure_pair
        ("kv-cache-full-pool-cast (reference)", "reference", 9),
        ("decode-step-fusion", "rejected", 9),  # its outputs failed the gate: measured alone
    ]
    by_label = {a.label: a for a in data.arms}
    accepted = next(d for d in data.state.decisions if d.verdict == "accepted")
    assert by_label[accepted.label].median_ms == pytest.approx(accepted.tpot_ms_after, rel=0.05)
    page = render_report(data)
    table = page[page.index('<table id="arms">') : page.index("</table>", page.index('<table id="arms">'))]
    rows = re.findall(r"<tr><td>([^<]+)</td>", table)
    assert rows == [label for label, _, _ in shown]
    assert f"{by_label['kv-cache-full-pool-cast'].median_ms:.2f} ms" in table
