"""`--proposer chain`: this round's candidates from every source ranked by predicted gain per
launch-minute (pure).

The candidates are every playbook proposal that fits the diagnosis (a patch, or a playbook's launch
change) and the search's next trial (`[search]`). Each gets:

- a predicted speedup: a playbook's finding's `predicted_speedup` (the gain model's, by the
  mechanism's magnitude), else its `expected_gain_ms` against the reference TPOT, else its share
  (`1 / (1 - share)`); a search trial's own prediction (the batching bound under `[workload]`), else,
  for the first trial whose knobs a finding implicates, that finding's prediction as a bound (a
  knob at most removes the op the finding names); a later TPE trial has none;
- its launch-minutes: the launches a candidate costs under the session's arms (1 sequential, 2
  interleaved, twice `max_launches_per_arm` alternating or cross-host) times the start-up this
  session measured for its launch command (`LoopState.startups`, door-recorded, so a replay ranks
  alike), or the median of the start-ups it measured for a command it never launched.

Score: log(predicted speedup) / launch-minutes. Candidates with a prediction go first, best score
first; on a tie a launch option goes before a patch (it changes no code, and if it leaves part of
the op both address, the patch still matches the next profile, whereas the patch first leaves the
knob nothing to act on); then the playbooks' order, then the search. Candidates without a
prediction follow in that order. The model is asked only when none is left (its patch is not known
before it is written, so its gain cannot be predicted).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from agent.proposer.tuning.budget import is_trial, trials_of
from state.profiling.diagnosis import Finding
from state.sessions.chain import Chain, ChainLink
from state.sessions.loop import LoopState, Proposal


@dataclass(frozen=True)
class Ranked:
    """A candidate with what ranked it."""

    proposal: Proposal
    predicted: float | None
    """Predicted speedup (>= 1), None: unknown."""
    basis: str
    """Where the prediction came from, in a few words."""
    minutes: float | None
    """Launch-minutes it costs; None where this session measured no start-up yet."""
    order: int
    """Its place among the sources (playbooks in the diagnosis's order, then the search)."""

    @property
    def score(self) -> float | None:
        """log(predicted) per launch-minute (per launch where no start-up was measured)."""
        if self.predicted is None:
            return None
        return math.log(max(self.predicted, 1.0)) / max(self.minutes or 1.0, 1e-6)

    def words(self) -> str:
        """`kv-cache-full-pool-cast 4.20x predicted (gain model), 0.05 launch-min`."""
        gain = (
            f"{self.predicted:.2f}x predicted ({self.basis})"
            if self.predicted
            else f"no prediction ({self.basis})"
        )
        cost = f", {self.minutes:.2f} launch-min" if self.minutes is not None else ""
        return f"{self.proposal.source} {gain}{cost}"


def key(argv: list[str]) -> str:
    """How a launch command is keyed in `LoopState.startups` (pure)."""
    return " ".join(argv)


def finding_speedup(f: Finding, tpot_ms: float | None) -> tuple[float | None, str]:
    """A finding's predicted speedup and its basis (pure)."""
    if f.predicted_speedup is not None:
        return f.predicted_speedup, "gain model"
    if f.expected_gain_ms is not None and tpot_ms and 0 < f.expected_gain_ms < tpot_ms:
        return tpot_ms / (tpot_ms - f.expected_gain_ms), "expected ms"
    if 0 < f.expected_gain_share < 1:
        return 1 / (1 - f.expected_gain_share), "expected share"
    return None, "no gain model"


def _tpot(state: LoopState) -> float | None:
    return state.reference.tpot_ms.median if state.reference is not None else None


def trial_speedup(state: LoopState, p: Proposal) -> tuple[float | None, str]:
    """A search trial's predicted speedup and its basis (pure): its own bound, else the first
    trial's implicating findings' best prediction, else none (TPE's pick)."""
    if p.predicted_speedup is not None:
        return p.predicted_speedup, "batching bound"
    cfg = state.target.search
    if cfg is None or state.diagnosis is None or trials_of(state):
        return None, "TPE trial"
    from agent.proposer.tuning.knobs import config_of

    changed = {n for n, v in config_of(p.launch_argv or [], cfg.knobs).items() if v is not None}
    found = [
        (finding_speedup(f, _tpot(state))[0], f.playbook)
        for f in state.diagnosis.findings
        if any(k.name in changed and k.implicated(f.playbook) for k in cfg.knobs)
    ]
    found = [(s, who) for s, who in found if s is not None]
    if not found:
        return None, "TPE trial"
    best, who = max(found)
    return best, f"at most {who}'s, which implicates its knobs"


def launches_per_candidate(state: LoopState) -> int:
    """Server launches one candidate costs under the session's arms (pure)."""
    arms = state.arms.arms if state.arms is not None else state.target.decide.arms
    most = 2 * state.target.decide.max_launches_per_arm
    return {"interleaved": 2, "alternating": most, "cross-host": most}.get(arms, 1)


def startups_of(state: LoopState) -> dict[str, float]:
    """Every start-up this session measured, by launch command, the running server's included (pure)."""
    known = dict(state.startups)
    if state.server is not None and state.server.launch_argv:
        known.setdefault(key(state.server.launch_argv), state.server.startup_s)
    return known


def launch_minutes(state: LoopState, argv: list[str]) -> float | None:
    """What a candidate launched with `argv` costs in launch-minutes (pure)."""
    known = startups_of(state)
    if not known:
        return None
    seconds = known.get(key(argv), statistics.median(known.values()))
    return launches_per_candidate(state) * seconds / 60


def rank(state: LoopState, candidates: list[Proposal]) -> list[Ranked]:
    """The candidates, best first (see the module's docstring) (pure)."""
    findings = {f.playbook: f for f in state.diagnosis.findings} if state.diagnosis else {}
    ranked = []
    for i, p in enumerate(candidates):
        if is_trial(p.source):
            predicted, basis = trial_speedup(state, p)
        elif p.source in findings:
            predicted, basis = finding_speedup(findings[p.source], _tpot(state))
        else:
            predicted, basis = p.predicted_speedup, "proposal"
        minutes = launch_minutes(state, p.launch_argv or state.kept_argv)
        ranked.append(Ranked(p, predicted, basis, minutes, i))

    def order(r: Ranked) -> tuple:
        score = r.score
        launch_first = 0 if r.proposal.launch_argv is not None and score is not None else 1
        return (score is None, -(score or 0.0), launch_first, r.order)

    return sorted(ranked, key=order)


def ranking_note(ranked: list[Ranked]) -> str:
    """`ranked by predicted gain per launch-minute: a ...; b ...` (pure)."""
    return "ranked by predicted gain per launch-minute: " + "; ".join(r.words() for r in ranked)


def chain_of(state: LoopState) -> Chain | None:
    """`--proposer chain`: the kept links, each as its decision judged it against the tree before
    it, and the whole chain's measured check; None in other modes (pure)."""
    if state.target.proposer.mode != "chain":
        return None
    links = []
    for d in state.decisions:
        if d.verdict != "accepted" or d.tpot_ms_after is None or d.tpot_ms_before is None:
            continue
        j = d.judgement
        last = j.last if j is not None and j.looks else None
        links.append(
            ChainLink(
                source=d.source,
                kind="launch option" if d.launch_argv is not None else "patch",
                tpot_ms_before=d.tpot_ms_before,
                tpot_ms_after=d.tpot_ms_after,
                speedup=last.speedup if last else None,
                ci=[last.ci_low, last.ci_high] if last else None,
                verdict=d.verdict,
            )
        )
    return Chain(links=links, whole=state.chain_check)
