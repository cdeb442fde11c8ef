"""What a human is shown when asked to approve: one proposal's view, or a batch's (pure, JSON-compatible)."""

from __future__ import annotations

from agent.context import need
from agent.decision.gate import moves, numerics
from agent.decision.gate.correctness import refusal
from agent.proposer.tuning.budget import is_trial
from state.sessions.loop import LoopState, Proposal

PAUSED_SERVERS = (
    "the session's servers are stopped while it waits; approving launches them again "
    "(counted as launches; `--keep-servers-when-paused` keeps them)"
)
"""What the approval view says of the servers of a session that released them."""


def approval_request(state: LoopState, proposal: Proposal | None = None) -> dict:
    """What a human sees when asked to approve `proposal` (default: the state's; JSON-compatible)."""
    p = proposal or need(state.proposal, "proposal")
    checks: dict = (
        {"mechanisms": [f"{m.playbook}: {m.note}" for m in state.mechanisms]} if state.mechanisms else {}
    )
    if (why := refusal(state)) is not None and state.options.approve == "auto":
        checks["auto_approval"] = why
    if state.options.release_servers_when_paused:
        checks["servers"] = PAUSED_SERVERS
    return checks | {
        "session": state.session_id,
        "playbook": p.source,
        "title": p.title,
        "explanation": p.explanation,
        "expected_gain_ms": p.expected_gain_ms,
        "expected_gain_share": p.expected_gain_share,
        "files": p.files,
        "diff": p.diff,
        "launch_argv": p.launch_argv,
        "launch_argv_before": state.argv if p.launch_argv is not None else None,
        "predicted_speedup": p.predicted_speedup,
        "paired_with": p.paired_with,
        "paired_speedup": p.paired_speedup,
        "evidence": [e.model_dump(mode="json") for e in p.evidence],
        "diagnosis": [] if p.evidence else diagnosis_lines(state),
        "proposer": p.proposer,
        "model": p.origin.model if p.origin else None,
        "rationale": p.origin.rationale if p.origin else None,
        "llm_tokens": p.origin.usage.tokens if p.origin else 0,
        "repairs": p.origin.repairs if p.origin else 0,
        "output_gate": gate_lines(state, [p]),
    }


def gate_lines(state: LoopState, proposals: list[Proposal]) -> list[str]:
    """What the approval view says of the output gate that will judge `proposals` once they run
    (pure): the policy; under `numerics`, the engine's own moves measured at the baseline with the
    test's figures, whether each change declares itself exact, and the changes judged so far."""
    cfg = state.target.correctness
    if cfg.policy == "tolerance":
        return [
            f"output gate: tolerance policy: kept when top-1 agreement >= {cfg.min_top1_agreement:.1%} "
            f"and max |dlogprob| <= {cfg.max_logprob_diff:.3f} (teacher-forced on the baseline's texts)"
        ]
    if cfg.policy == "exact":
        return ["output gate: exact policy: kept only when its greedy outputs equal the baseline's"]
    task = ", unless the target's task shows no loss of accuracy" if cfg.task_items else ""
    lines = [
        f"output gate: numerics policy: kept when exact or within the engine's numerics; beyond is refused{task}"
    ]
    noise = state.numerics_noise
    if noise is None:
        lines.append("will be judged against the engine's own moves, not measured yet (at the baseline)")
    else:
        host = (
            f"; {noise.host_sessions} session(s) on this host moved them at most "
            f"{moves.fmt(noise.host_max_dlogprob)}"
            if noise.host_sessions > 1
            else ""
        )
        math = state.options.numerics_math_distance and moves.from_math(noise.reference, noise.schedules)
        test = (
            "when its distance from the float32 math per prompt is above "
            f"{moves.MARGIN:g}x the baseline's own"
            if math
            else f"when its mean move per prompt is above {moves.MARGIN:g}x the engine's own"
        )
        lines.append(
            f"will be judged against {numerics.yardstick(noise)}, measured at the baseline{host}: refused "
            f"{test} at {1 - moves.ALPHA:.0%} confidence (false-reject {moves.ALPHA:.0%}), or any "
            f"prompt's past {moves.GROSS:g}x the engine's largest"
        )
    lines += [declared(p) for p in proposals]
    if words := numerics.judged_words(state):
        lines.append("judged so far: " + "; ".join(words))
    return lines


def declared(p: Proposal) -> str:
    """Whether a change declares itself exact, and what passes then (pure)."""
    if p.proposer == "llm":
        return f"{p.source}: a model's patch declares nothing exact: exact or within passes"
    whose = "every knob it sets says" if is_trial(p.source) else "its playbook says"
    if p.exact:
        return f"{p.source} declares itself exact ({whose} `exact = true`): only an exact verdict passes"
    whose = "a knob it sets lacks" if is_trial(p.source) else "its playbook lacks"
    return f"{p.source} is not declared exact ({whose} `exact = true`): exact or within passes"


def diagnosis_lines(state: LoopState) -> list[str]:
    """What the session's last profile's diagnosis says, for a proposal that carries no evidence of
    its own (a launch option, a model's patch): its decode phases, heaviest operators and findings
    (pure); none without a diagnosis (a search that never profiled)."""
    d = state.diagnosis
    if d is None:
        return []
    basis = "device" if d.time_basis == "device" else "CPU"
    lines = [d.decode_phases.line()] if d.decode_phases is not None else []
    if d.top_ops:
        lines.append(
            f"heaviest ops ({basis} time): " + ", ".join(f"{op.name} {op.share:.0%}" for op in d.top_ops[:3])
        )
    lines.append("findings: " + (", ".join(f.playbook for f in d.findings) or "none"))
    return lines


def batch_request(state: LoopState) -> dict:
    """The approval asked for a batch of parallel candidates: the first candidate's view with the
    batch's title, files and diffs, and each candidate's own view under `candidates`."""
    views = [approval_request(state, p) for p in state.candidates]
    ids = [v["playbook"] for v in views]
    return views[0] | {
        "playbook": ", ".join(ids),
        "title": f"{len(ids)} candidates to try at once on the target's [[hosts]]: {', '.join(ids)}",
        "files": sorted({f for v in views for f in v["files"]}),
        "diff": "".join(v["diff"] for v in views),
        "output_gate": gate_lines(state, state.candidates),
        "candidates": views,
    }
