"""What a session report shows, from the store alone: the session's states (checkpoints, or a
replay of an imported session's recording) and its recorded tool calls."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from agent.decision.stats.levels import at_level
from agent.decision.stats.rule import percentile, window_metric
from agent.sessions.reading.stored import StoredSessions
from state.door.records import ToolCallRecord
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig
from state.profiling.profile import ProfileSummary
from state.sessions.loop import Approval, Decision, LoopState, Proposal
from state.sessions.session import SessionInfo, Summary
from tools.client.stats import timed, tpot_samples
from tools.door.replay import ReplayDivergence
from tools.errors import NotReplayable

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
    """Per-request TPOT (mean inter-token latency) of the requests whose stream timed its tokens."""
    itl_ms: list[float]
    """Every inter-token latency of every request."""
    requests: int = 0
    """Requests measured (a stream flushed at once times no token: counted here, not in `tpot_ms`)."""
    median_ms: float = 0.0
    ci_ms: tuple[float, float] = (0.0, 0.0)
    """95% percentile-bootstrap CI of the median per-request TPOT."""
    tpot_p99_ms: float | None = None
    """`[workload]`: TPOT p99 (`median_ms` is the p50), of the primary level's requests."""
    objective: list[float] = field(default_factory=list)
    """`[workload]`: each window's value of the objective, in its unit (what the rule judged)."""
    objective_median: float = 0.0
    objective_ci: tuple[float, float] = (0.0, 0.0)
    """`[workload]`: the median over windows of the objective, and its 95% bootstrap CI."""
    levels: dict[int, Arm] = field(default_factory=dict)
    """`[workload]` with several concurrency levels: the same launch at each other level."""
    beside: Arm | None = None
    """`measure.bench_serving.use = "both"`: the same launch as sglang.bench_serving measured it
    (`label` names the client), drawn beside this arm, never judged."""


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


def gather(sessions: StoredSessions, session_id: str) -> ReportData:
    """The report's data for a live, paused, finished or imported session (reads only; LangGraph
    loaded only for a session with checkpoints: a `Sessions` has it loaded)."""
    info = sessions.info(session_id)
    replayed = not sessions.has_state(session_id)
    try:
        history = sessions.history(session_id)
    except ReplayDivergence as exc:  # an altered or foreign import: one line, a 4xx page
        raise NotReplayable(f"session {session_id}: its recording does not replay here: {exc}") from None
    state = history[-1]
    calls = sessions.store.tool_calls(session_id)
    pending = sessions.pending_approval(session_id) if info.status in ("running", "paused") else None
    if info.status == "paused" and pending is None:  # answered: a process is continuing it
        info = info.model_copy(update={"status": "running"})
    return ReportData(
        info=info,
        state=state,
        summary=sessions.summary(info, state),
        arms=arms(calls, state.decisions, state.target.workload),
        proposals=proposals(history),
        ops=ops_changes(calls, state.decisions),
        spans=spans(calls),
        calls=len(calls),
        pending=pending,
        replayed=replayed,
    )


def role(label: str) -> str:
    """What a measurement's label says it measured (pure): `aa` (an A/A launch or pair), `reference`
    (the reference tree beside or between candidate launches), `confirm` / `confirm reference` (a
    confirmation pair), else `candidate`. Labels: `iteration-N[-confirm][-reference|-candidate][-K]`,
    `aa-N[-a|-b]`."""
    if label.startswith("aa-"):
        return "aa"
    kind = "reference" if label.endswith("-reference") or "-reference-" in label else "candidate"
    if "-confirm" in label:
        return "confirm" if kind == "candidate" else "confirm reference"
    return kind


def arms(
    calls: list[ToolCallRecord], decisions: list[Decision], workload: WorkloadConfig | None = None
) -> list[Arm]:
    """Every measured arm, in order (pure): the baseline; each candidate (its requests: the `measure`
    node's after its launch by `relaunch`, over all its launches and looks), followed by its reference
    arm and confirmation arms, whatever the arms kind (`bench.measure` of sequential, alternating and
    cross-host arms; `bench.measure_pair` of interleaved ones), then, for cross-host arms, the
    reference host's candidate and reference arms (its `measure@HOST` calls, named `... on HOST`);
    each parallel trial's baseline and candidate on its host (`trial@HOST` calls); each A/A launch
    or pair. Candidates pair, in order, with the decisions that have a candidate TPOT.
    Under `[workload]` each arm also holds its windows' objective."""
    base: list[Measurement] = []
    groups: list[dict[tuple[str, str], list[Measurement]]] = []  # (host, role): "" is this host
    aa: dict[str, list[Measurement]] = {}
    trials: dict[tuple[str, str], list[Measurement]] = {}  # (name, verdict)
    for c in calls:
        if c.output is None:
            continue
        if c.node == "relaunch" and c.name == "server.launch":
            groups.append({})
            continue
        if c.name == "bench.measure":
            got = [Measurement.model_validate(c.output["measurement"])]
        elif c.name == "bench.measure_pair":
            got = [Measurement.model_validate(c.output[k]) for k in ("candidate", "reference")]
        else:
            continue
        for m in got:
            kind = role(m.label)
            if kind == "aa":
                aa.setdefault(m.label, []).append(m)
            elif c.node.split("@")[0] == "trial":  # a parallel trial's launches, never the session's
                trials.setdefault(trial_arm(m.label, c.node.partition("@")[2]), []).append(m)
            elif c.node == "baseline" or not groups:
                base.append(m)
            elif c.node.split("@")[0] == "measure":  # `measure@HOST`: the reference host's launches
                host = c.node.partition("@")[2]
                groups[-1].setdefault((host, kind), []).append(m)
    measured = [d for d in decisions if d.tpot_ms_after is not None]
    out = [_arm("baseline", "baseline", base, workload)] if base else []
    for i, group in enumerate(g for g in groups if g):
        d = measured[i] if i < len(measured) else None
        label, verdict = (d.label, d.verdict) if d else (f"candidate {i + 1}", "measuring")
        for (host, kind), ms in sorted(group.items(), key=lambda kv: (kv[0][0], ROLES.index(kv[0][1]))):
            where = f"{kind} on {host}" if host else kind
            name = label if where == "candidate" else f"{label} ({where})"
            out.append(_arm(name, verdict if kind == "candidate" else "reference", ms, workload))
    out += [_arm(name, verdict, ms, workload) for (name, verdict), ms in trials.items()]
    out += [_arm(label, "aa", ms, workload) for label, ms in aa.items()]
    return out


TRIAL_LABEL = re.compile(r"trial-iteration-\d+-(?P<source>.+)-(?P<tree>baseline|candidate)")
"""A parallel trial's measurement label (agent/hostrun.py `HostRun.measured`)."""


def trial_arm(label: str, host: str) -> tuple[str, str]:
    """(name, verdict) of a parallel trial's launch on `host` (pure): `SOURCE (trial on HOST)`, a
    `trial`, or `SOURCE (trial baseline on HOST)`, a `baseline`; an unknown label as it is."""
    if (m := TRIAL_LABEL.fullmatch(label)) is None:
        return f"{label} (on {host})", "trial"
    if m["tree"] == "baseline":
        return f"{m['source']} (trial baseline on {host})", "baseline"
    return f"{m['source']} (trial on {host})", "trial"


ROLES = ("candidate", "reference", "confirm", "confirm reference")
"""The order a candidate's arms are shown in."""


def median_ci(values: list[float]) -> tuple[float, tuple[float, float]]:
    """The median of `values` and its 95% percentile-bootstrap CI (seeded) (pure)."""
    rng = np.random.default_rng(0)
    meds = np.median(rng.choice(np.array(values), size=(BOOTSTRAP, len(values))), axis=1)
    return float(np.median(values)), (float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5)))


def _arm(label: str, verdict: str, ms: list[Measurement], workload: WorkloadConfig | None) -> Arm:
    if workload is not None and len(workload.levels) > 1:  # the primary's, which is judged; and the others'
        others = {
            c: _arm(label, verdict, [at_level(m, c) for m in ms], workload.at(c)) for c in workload.levels[1:]
        }
        arm = _arm(label, verdict, [at_level(m, workload.primary) for m in ms], workload.at(workload.primary))
        arm.levels = others
        return arm
    reqs = [r for m in ms for r in m.requests]
    tpot = tpot_samples(reqs)  # streams that timed their tokens (a merged one reads ~0 ms)
    arm = Arm(label, verdict, tpot, [x for r in timed(reqs) or reqs for x in r.itl_ms], len(reqs))
    if tpot:
        arm.median_ms, arm.ci_ms = median_ci(tpot)
    if workload is not None and any(m.windows for m in ms):
        arm.tpot_p99_ms = percentile(tpot, 0.99)
        arm.objective = [
            window_metric(w, [r for r in m.requests if r.window == w.index], workload)
            for m in ms
            for w in m.windows
        ]
        arm.objective_median, arm.objective_ci = median_ci(arm.objective)
    if besides := [m.beside for m in ms if m.beside is not None]:
        arm.beside = _arm(besides[0].client, verdict, besides, workload)
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
