"""Candidates tried at the same time on the target's `[[hosts]]`: who goes where, and the join.

Pure functions of the state. `fan_out` sends the first batch (LangGraph `Send`, one `trial` task per
candidate, each on its own host, at most `--parallel` at once); `settle` runs at the `join` step:
it sends the next batch (candidates still queued, and those whose host failed, retried once on a
host that has not failed this iteration), or, when every candidate has had its trials, names the
best verified one (the largest speedup among the trials the rule accepted) and the decisions on
the others; a model-written one not kept also becomes a `ModelTrial` (its diff and what its trials
showed), which the model's next round is shown as after a trial on the session's own host; so does
one that was accepted but lost to a faster candidate (`outpaced`: verdict `accepted`, the one kept
instead).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from langgraph.types import Send

from state.measurement.trials import Trial
from state.proposers.proposer import ModelTrial
from state.sessions.fanout import TrialTask
from state.sessions.loop import Decision, LoopState, Proposal
from state.sessions.updates import LoopUpdate

MAX_ATTEMPTS = 2
"""A candidate whose host failed is retried once elsewhere, then dropped."""


@dataclass
class Plan:
    """What `join` does next: send more trials, or keep a winner (or none)."""

    sends: list[Send] = field(default_factory=list)
    queue: list[str] = field(default_factory=list)
    winner: Proposal | None = None
    decisions: list[Decision] = field(default_factory=list)
    model_trials: list[ModelTrial] = field(default_factory=list)
    """The model-written candidates not kept, with what their trials showed (`told`)."""
    note: str = ""


def task(state: LoopState, proposal: Proposal, host_index: int, attempt: int) -> TrialTask:
    """The payload of one trial (pure)."""
    return TrialTask(
        session_id=state.session_id,
        iteration=state.iteration,
        host=state.target.hosts[host_index],
        attempt=attempt,
        proposal=proposal,
        target=state.target,
        argv=state.kept_argv,
        kept_diffs=state.kept_diffs,
        python=state.options.python,
        local_dir=state.options.session_dir,
        noise=state.launch_noise,
        schedule_gate=state.options.schedule_gate,
    )


def this_round(state: LoopState) -> list[Trial]:
    """This iteration's trials so far."""
    return [t for t in state.trials if t.iteration == state.iteration]


def batch(state: LoopState, pending: list[tuple[str, int]]) -> tuple[list[Send], list[str]]:
    """Sends for the first pending (playbook, attempt) pairs, one per healthy host, at most
    `--parallel`; and the playbooks left (pure)."""
    failed = {t.host for t in this_round(state) if t.status == "host-failed"}
    hosts = [i for i, h in enumerate(state.target.hosts) if h.name not in failed]
    cap = min(state.options.parallel or len(hosts), len(hosts))
    by_id = {p.source: p for p in state.candidates}
    chosen = pending[:cap]
    sends = [
        Send("trial", task(state, by_id[pb], host, attempt))
        for (pb, attempt), host in zip(chosen, hosts, strict=False)
    ]
    sent = {pb for pb, _ in chosen}
    return sends, [pb for pb in state.trial_queue if pb not in sent]


def fan_out(state: LoopState, proposals: list[Proposal]) -> tuple[list[Send], LoopUpdate]:
    """The first batch of trials and the state update that queues the rest (pure)."""
    ids = [p.source for p in proposals]
    queued = state.model_copy(update={"candidates": proposals, "trial_queue": ids})
    sends, rest = batch(queued, [(pb, 1) for pb in ids])
    return sends, {"candidates": proposals, "trial_queue": rest, "proposal": None}


def told(state: LoopState, p: Proposal, verdict: str, reason: str, trials: list[Trial]) -> ModelTrial:
    """What a model-written candidate's trials showed, as its next rounds are told it: the verdict
    and reason (each host's speedup and CI), where outputs diverged, a crash's log tail (pure)."""
    lines = [f"{verdict}: {reason}", *(f"on {t.host}: {line}" for t in trials for line in t.feedback)]
    return ModelTrial(
        iteration=state.iteration,
        candidate=p.source,
        verdict=verdict,
        diff=p.diff,
        feedback=lines,
        launch_argv=p.launch_argv,
    )


def outpaced(state: LoopState, p: Proposal, accepted: list[Trial], best: Trial) -> ModelTrial:
    """A model-written candidate accepted on its host(s) but not kept, because `best` (another
    candidate of the round) was faster: its verdict, speedup and CI there, and which was kept (pure)."""
    lines = [
        f"accepted on {t.host}: {t.reason}; but {best.playbook} was faster ({best.speedup or 0.0:.2f}x "
        f"on {best.host}) and was kept instead: this patch was not applied"
        for t in accepted
    ]
    lines += [f"on {t.host}: {line}" for t in accepted for line in t.feedback]
    return ModelTrial(
        iteration=state.iteration,
        candidate=p.source,
        verdict="accepted",
        diff=p.diff,
        feedback=lines,
        launch_argv=p.launch_argv,
        kept_instead=best.playbook,
    )


def settle(state: LoopState) -> Plan:
    """At `join`: the next batch, or the outcome of this iteration's trials (pure)."""
    trials = this_round(state)
    by_pb: dict[str, list[Trial]] = {}
    for t in trials:
        by_pb.setdefault(t.playbook, []).append(t)
    retry = [
        (pb, len(ts) + 1)
        for pb, ts in by_pb.items()
        if all(t.status == "host-failed" for t in ts) and len(ts) < MAX_ATTEMPTS
    ]
    failed = {t.host for t in trials if t.status == "host-failed"}
    healthy = [h for h in state.target.hosts if h.name not in failed]
    pending = retry + [(pb, 1) for pb in state.trial_queue]
    if pending and healthy:
        sends, queue = batch(state, pending)
        names = ", ".join(f"{s.arg.proposal.source} on {s.arg.host.name}" for s in sends)
        return Plan(sends=sends, queue=queue, note=f"next trials: {names}")
    accepted = [t for t in trials if t.verdict == "accepted" and t.speedup is not None]
    best = max(accepted, key=lambda t: t.speedup or 0.0) if accepted else None
    plan = Plan(winner=next((p for p in state.candidates if best and p.source == best.playbook), None))
    for p in state.candidates:
        ts = by_pb.get(p.source, [])
        if best is not None and p.source == best.playbook:
            continue
        if any(t.verdict == "accepted" for t in ts):
            # also good: left untried (a playbook's is tried on top of the winner next iteration;
            # the model is told a model candidate was accepted but another was faster)
            if p.origin is not None and best is not None:
                plan.model_trials.append(outpaced(state, p, [t for t in ts if t.verdict == "accepted"], best))
            continue
        if not ts:
            why, verdict = "dropped: no host left to try it on (every host failed)", "failed"
        else:
            why = "; ".join(f"on {t.host}: {t.reason}" for t in ts)
            verdict = ts[-1].verdict if ts[-1].status == "measured" else "failed"
            if ts[-1].status == "host-failed":
                why = f"dropped after its host(s) failed: {why}"
        plan.decisions.append(
            Decision(iteration=state.iteration, source=p.source, verdict=verdict, reason=f"trial {why}")
        )
        if p.origin is not None:
            plan.model_trials.append(told(state, p, verdict, f"trial {why}", ts))
    keep = (
        f"keep {best.playbook} ({best.speedup:.2f}x on {best.host}), verify it here" if best else "none kept"
    )
    plan.note = f"{len(trials)} trial(s) on {len({t.host for t in trials})} host(s): {keep}"
    if failed:
        plan.note += f"; failed host(s): {', '.join(sorted(failed))}"
    return plan
