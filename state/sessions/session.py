"""The session index entry and the summary a finished session prints."""

from datetime import datetime
from pathlib import Path
from typing import Literal

from state.base import Model
from state.measurement.floor import StepFloor
from state.sessions.chain import Chain
from state.sessions.ids import SessionId

SessionStatus = Literal["running", "paused", "done", "failed", "interrupted", "abandoned"]


class Summary(Model):
    """What a session achieved; `perfloop demo --json` prints it as its last line."""

    session: SessionId
    """Session id."""
    status: SessionStatus
    """Where the session ended."""
    tpot_ms_before: float | None
    """Median TPOT of the baseline."""
    tpot_ms_after: float | None
    """Median TPOT after the accepted patches (equals before when none was accepted)."""
    speedup: float | None
    """The session's whole gain, baseline vs final: tpot_ms_before (the baseline, measured alone
    at the start) / tpot_ms_after (the final reference, measured when it was decided, beside its
    reference with interleaved arms); under `[workload]` the objective's ratio instead (see
    `objective`): after / before for a throughput, before / after for a latency. No interval:
    `speedup_judged` and `speedup_ci` are the decisive comparison's."""
    ttft_ms_before: float | None
    """Median TTFT of the baseline."""
    ttft_ms_after: float | None
    """Median TTFT at the end."""
    outputs_identical: bool | None
    """Whether the final outputs equal the baseline's (greedy, fixed prompts); None when no
    candidate was kept (nothing was compared with the baseline's)."""
    accepted: list[str]
    """Playbook ids of the accepted fixes (patches and launch-option changes), in order."""
    rejected: list[str]
    """Playbook ids proposed but rejected, rolled back or failed."""
    commits: list[str]
    """Commit shas of accepted patches on the session branch."""
    branch: str | None
    """The session branch in the target repo."""
    checkout: str | None = None
    """The branch (or short commit) the ended session gave the target's checkout back on, the one
    it was found on (the accepted commits stay on `branch`); None: the checkout is on `branch` (a
    paused session, a switch the user's uncommitted edit refused, a session recorded before)."""
    server_launches: int
    """How many times the target server was started."""
    profile_method: str
    """`patch` or `api`: how the profiles were taken."""
    measured_by: str | None = None
    """The client that measured TPOT: `perfloop`, or sglang's bench_serving with its release."""
    workload: str | None = None
    """`[workload]` in words (concurrency, window, objective); None: requests one at a time."""
    serving_before: str | None = None
    """`[workload]`: the baseline's throughputs and TPOT/TTFT p50/p99 at that concurrency."""
    serving_after: str | None = None
    """`[workload]`: the same of the final reference."""
    beside_before: str | None = None
    """`measure.bench_serving.use = "both"`: the baseline's figures by sglang.bench_serving on the
    same launch, e.g. `sglang.bench_serving (sglang 0.5.9): at concurrency 8: ...` (not judged)."""
    beside_after: str | None = None
    """The same of the final reference."""
    objective: str | None = None
    """`[workload]`: what `speedup` is the ratio of, with its unit, e.g. `output throughput
    (tok/s)`; None: per-request TPOT."""
    objective_before: float | None = None
    """`[workload]`: the baseline's objective over all its windows (tokens or requests over their
    wall time, or the percentile over all their requests)."""
    objective_after: float | None = None
    """`[workload]`: the same of the final reference."""
    tpot_ms_p99_before: float | None = None
    """`[workload]`: the baseline's TPOT p99 at the concurrency (`tpot_ms_before` is the p50)."""
    tpot_ms_p99_after: float | None = None
    """`[workload]`: the same of the final reference."""
    iterations: int
    """Profile/diagnose iterations run."""
    verdict: str | None = None
    """The CI rule's verdict on the decisive candidate (the last accepted one, else the last
    measured one); None when no candidate was measured or the session used the IQR rule."""
    speedup_ci: list[float] | None = None
    """[low, high] of that candidate's TPOT speedup CI (under `[workload]` its objective's) (simultaneous `confidence` over looks)."""
    speedup_judged: float | None = None
    """That candidate's speedup over its reference as the verdict compared them (the decisive
    look's estimate, inside `speedup_ci`); None where no candidate was judged, or in summaries
    recorded before it."""
    requests_per_arm: int | None = None
    """Requests per prompt in that candidate's arm when it was decided."""
    launch_noise: float | None = None
    """Launch-to-launch noise (SD of log TPOT) the CI included."""
    decision: str | None = None
    """That decision's one-line report, e.g. `TPOT 3.10x [2.20, 4.35] 95% CI, n = ...`."""
    power: str | None = None
    """The smallest gain the session could keep, fixed on the baseline before any candidate, e.g.
    `power: keeps gains >= 1.041x (80% of the time) with 3 look(s) x 5 requests per prompt (...)`;
    None for sessions before it."""
    arms: str | None = None
    """`[decide] arms = "auto"` as resolved on the baseline server, with why, e.g. `arms auto ->
    alternating (two servers do not fit: GPU 0 has ...)`; None when the target named its arms."""
    output_gate: str | None = None
    """The output gate's policy and its result on the decisive candidate (the last accepted one it
    judged, else the last), e.g. `tolerance: tolerance gate: top-1 agreement 96.9% (>= 90.0%), ...`
    or, under `exact` in sessions that tell the math from the schedule, `exact alone; outputs vary
    with the schedule on this host: 1/12 ...; kv-cache-full-pool-cast: outputs identical alone; ...`;
    None under `exact` in sessions before them."""
    correctness_set: str | None = None
    """How far the correctness set reached, e.g. `3 long prompts of 41/139/216 + 40 tokens to the
    context limit 256 (/get_server_info context_len), ...`, or that the limit is unknown and auto
    approval was refused; None for sessions before the long prompts."""
    mechanisms: list[str] = []
    """Predicted vs realized for each accepted patch a later profile checked, one line each."""
    unexplained_gains: list[str] = []
    """Accepted playbooks whose predicted operator did not shrink (a gain with no mechanism)."""
    stop_reason: str
    """Why the loop ended."""
    llm_tokens: int = 0
    """Prompt plus completion tokens spent on model calls."""
    llm_calls: int = 0
    """Model calls made (answered from a crashed attempt's record included)."""
    repo: Path
    """The target repo."""
    launch_argv: list[str] = []
    """The launch command at the end: the target's, or as accepted launch-option fixes left it."""
    trials: list[str] = []
    """Candidates tried at once on the target's `[[hosts]]`: one line per host and attempt."""
    search_trials: list[str] = []
    """The launch-option search's trials (`[search]`): config, TPOT with the speedup CI against
    the reference, verdict; one line each."""
    chain: Chain | None = None
    """`--proposer chain`: each kept link (patch or launch option) with its judged speedup against
    the tree before it, and the whole chain's judged speedup against the baseline, measured by a
    final comparison of the baseline's tree and launch command with the final ones (`whole`; when
    two or more links were kept); None in other modes."""
    floors: list[StepFloor] = []
    """The baseline's decode step, each kept chain link's and the final one's against its
    memory-bandwidth floor (weights + live KV bytes over the GPUs' bandwidth, agent/sessions/floor.py),
    or what is missing for one; empty in summaries recorded before it."""


class SessionInfo(Model):
    """A session as listed by `perfloop sessions`."""

    id: SessionId
    """Session id (also the LangGraph thread id)."""
    created_at: datetime
    """When it started."""
    target_name: str
    """The target's name."""
    target_path: Path | None
    """The target config file, or None for the embedded demo."""
    repo: Path
    """The target repo."""
    status: SessionStatus
    """Last known status."""
    summary: Summary | None = None
    """Set when the session ends or pauses."""
    parent: SessionId | None = None
    """The session this one was forked from."""
    host: str | None = None
    """The machine (host name) that last ran it; None in stores older than the shared store."""
