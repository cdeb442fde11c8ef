"""What a session report shows, gathered from the store alone: the session's states (checkpoints,
or a replay of the recording for an imported session) and its recorded tool calls."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from agent.sessions.runner import Sessions
from agent.sessions.summary import summarize as summarize_session
from state.loop import Approval, Decision, LoopState, Proposal
from state.measure import Measurement
from state.profile import ProfileSummary
from state.records import ToolCallRecord
from state.session import SessionInfo, Summary

BOOTSTRAP = 2000
"""Resamples behind each arm's CI of the median TPOT."""


@dataclass
class Arm:
    """The requests one server launch was measured with: the baseline or a candidate."""

    label: str
    """`baseline`, or what was judged (a playbook id, an edited patch)."""
    verdict: str
    """`baseline`, or the decision's verdict."""
    tpot_ms: list[float]
    """Per-request TPOT (mean inter-token latency)."""
    itl_ms: list[float]
    """Every inter-token latency of every request."""
    median_ms: float = 0.0
    ci_ms: tuple[float, float] = (0.0, 0.0)
    """95% percentile-bootstrap CI of the median per-request TPOT."""


@dataclass
class ProposalView:
    """One proposal with what became of it."""

    proposal: Proposal
    approval: Approval | None = None
    decision: Decision | None = None


@dataclass
class OpsChange:
    """Top ops of the profile before an accepted patch and of the next profile (if one was taken)."""

    label: str
    before: ProfileSummary
    after: ProfileSummary | None


@dataclass
class Span:
    """A node's stretch of tool calls (recorded start times and durations)."""

    node: str
    start: datetime
    end: datetime


@dataclass
class ReportData:
    """Everything the report renders."""

    info: SessionInfo
    state: LoopState
    summary: Summary
    arms: list[Arm]
    proposals: list[ProposalView]
    ops: list[OpsChange]
    spans: list[Span]
    calls: int
    pending: dict | None = None
    replayed: bool = False
    """Whether the states come from a replay of the recording (an imported session): their
    transition times are then the replay's, not the session's."""


def gather(sessions: Sessions, session_id: str) -> ReportData:
    """The report's data for a live, paused, finished or imported session (reads only)."""
    info = sessions.info(session_id)
    replayed = not sessions.graph.get_state(sessions.config(session_id)).values
    history = sessions.history(session_id)
    state = history[-1]
    calls = sessions.store.tool_calls(session_id)
    pending = sessions.pending_approval(session_id) if info.status in ("running", "paused") else None
    if info.status == "paused" and pending is None:  # answered: a process is continuing it
        info = info.model_copy(update={"status": "running"})
    return ReportData(
        info=info,
        state=state,
        summary=info.summary or summarize_session(state, info.status),
        arms=arms(calls, state.decisions),
        proposals=proposals(history),
        ops=ops_changes(calls, state.decisions),
        spans=spans(calls),
        calls=len(calls),
        pending=pending,
        replayed=replayed,
    )


def arms(calls: list[ToolCallRecord], decisions: list[Decision]) -> list[Arm]:
    """The baseline and each measured candidate, in order (pure). A candidate's requests are the
    `measure` node's measurements after its launch by `relaunch` (with alternating arms its own
    launches', not the reference tree's); they pair, in order, with the decisions that have a
    candidate TPOT."""
    base: list[Measurement] = []
    groups: list[list[Measurement]] = []
    for c in calls:
        if c.output is None:
            continue
        if c.node == "relaunch" and c.name == "server.launch":
            groups.append([])
        elif c.name == "bench.measure" and c.node in ("baseline", "measure"):
            m = Measurement.model_validate(c.output["measurement"])
            if c.node == "measure" and "-reference-" in m.label:
                continue  # alternating arms: a launch of the reference tree
            (base if c.node == "baseline" or not groups else groups[-1]).append(m)
    measured = [d for d in decisions if d.tpot_ms_after is not None]
    out = [_arm("baseline", "baseline", base)] if base else []
    for i, group in enumerate(g for g in groups if g):
        d = measured[i] if i < len(measured) else None
        out.append(_arm(d.label if d else f"candidate {i + 1}", d.verdict if d else "measuring", group))
    return out


def _arm(label: str, verdict: str, ms: list[Measurement]) -> Arm:
    reqs = [r for m in ms for r in m.requests]
    tpot = [r.tpot_ms for r in reqs]
    arm = Arm(label, verdict, tpot, [x for r in reqs for x in r.itl_ms])
    if tpot:
        arm.median_ms = float(np.median(tpot))
        rng = np.random.default_rng(0)
        meds = np.median(rng.choice(np.array(tpot), size=(BOOTSTRAP, len(tpot))), axis=1)
        arm.ci_ms = (float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5)))
    return arm


def proposals(history: list[LoopState]) -> list[ProposalView]:
    """Each proposal the session made, with its answer and its decision (pure)."""
    views: list[ProposalView] = []
    for st in history:
        p = st.proposal
        if p is not None and (not views or views[-1].proposal != p):
            views.append(ProposalView(p))
        # `propose` clears the approval with each new proposal; a rejection clears the proposal.
        if (
            views
            and st.approval is not None
            and views[-1].approval is None
            and p in (None, views[-1].proposal)
        ):
            views[-1].approval = st.approval
    used: set[int] = set()
    decisions = history[-1].decisions if history else []
    for v in views:
        for i, d in enumerate(decisions):
            if i not in used and d.iteration == v.proposal.iteration and d.source == v.proposal.source:
                v.decision = d
                used.add(i)
                break
    return views


def ops_changes(calls: list[ToolCallRecord], decisions: list[Decision]) -> list[OpsChange]:
    """For each accepted decision: the profile of its iteration and the next one (pure)."""
    profiles = [
        ProfileSummary.model_validate(c.output)
        for c in calls
        if c.name == "profile.read" and c.output is not None
    ]
    out = []
    for d in decisions:
        if d.verdict == "accepted" and 0 < d.iteration <= len(profiles):
            after = profiles[d.iteration] if d.iteration < len(profiles) else None
            out.append(OpsChange(d.label, profiles[d.iteration - 1], after))
    return out


def spans(calls: list[ToolCallRecord]) -> list[Span]:
    """Consecutive calls of one node merged into one span (pure)."""
    out: list[Span] = []
    for c in calls:
        end = c.started_at + timedelta(seconds=c.duration_s)
        if out and out[-1].node == c.node:
            out[-1].end = max(out[-1].end, end)
        else:
            out.append(Span(c.node, c.started_at, end))
    return out
