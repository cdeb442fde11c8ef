"""Steps that find the bottleneck: profile the running server, diagnose it (propose: propose.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, call, host_dir, need, step, transition
from agent.decision.rules import rule_for
from agent.decision.stats import mechanism
from agent.steps.actions import playbooks_of
from playbooks.engine import diagnose as run_diagnosis
from state.door.calls import FetchArgs, PathArgs, ProfileArgs, ProfileFiles
from state.measurement.decision import MechanismCheck
from state.profiling.diagnosis import DiagnosisContext
from state.profiling.profile import ProfileSummary
from state.sessions.loop import LoopState, ProfileResult
from state.sessions.updates import LoopUpdate
from tools import profiling
from tools.engines.registry import engine
from tools.hosts import transfer


@step
def profile(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["diagnose", "abort"]]:
    """Take a profile by the session's method: the instrumentation trigger or /start_profile."""
    cfg, server = state.target.profile, need(state.server, "running server")
    pid = f"it{state.iteration}-{cfg.method}"
    files = call(
        runtime,
        profiling.take,
        ProfileArgs(
            method=cfg.method,
            base_url=server.base_url,
            model=state.target.model,
            out_dir=host_dir(state) / "profiles" / pid,
            profile_dir=server.profile_dir,
            profile_id=pid,
            warmup_steps=cfg.warmup_steps,
            active_steps=cfg.active_steps,
            prompt=cfg.prompt,
            timeout_s=cfg.timeout_s,
            tp_size=state.target.tp_size,
            sglang_version=state.sglang.version if state.sglang else None,
            vllm_trace_dir=engine(state.target.kind).api_trace_dir(state.argv, state.target.repo),
        ),
    )
    if state.target.host.kind == "ssh":
        files = fetched(state, runtime, files, state.options.session_dir / "profiles" / pid)
    result = ProfileResult(iteration=state.iteration, method=cfg.method, **files.model_dump())
    note = f"{cfg.method} profile: {result.trace_path.name} ({result.active_tokens} active tokens)"
    return Command(
        update=LoopUpdate(profiles=[result], transitions=transition("profile", note)), goto="diagnose"
    )


def fetched(
    state: LoopState, runtime: Runtime[LoopContext], files: ProfileFiles, local_dir: Path
) -> ProfileFiles:
    """Copy a profile's folder from the target host into `local_dir`; the files' local paths."""
    trace = files.trace_path
    folder = trace.parent if trace.name.endswith((".json", ".json.gz")) else trace  # or per-rank
    local = call(
        runtime,
        transfer.fetch,
        FetchArgs(host=state.target.host, remote=folder, local=local_dir / folder.name),
    ).path
    return files.model_copy(
        update={
            "trace_path": local if folder == trace else local / trace.name,
            "summary_path": local / files.summary_path.name if files.summary_path else None,
        }
    )


@step
def diagnose(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["propose", "abort"]]:
    """Rank ops by device (or CPU) self time and match the playbooks' signatures."""
    latest = state.profiles[-1]
    summary = call(runtime, profiling.read, PathArgs(path=latest.trace_path))
    ctx = DiagnosisContext(
        target_kind=state.target.kind,
        sglang_version=state.sglang.version if state.sglang is not None else None,
        active_tokens=latest.active_tokens,
        tpot_ms=need(state.reference, "reference measurement").tpot_ms.median,
    )
    result = run_diagnosis(summary, ctx, playbooks_of(state)).model_copy(
        update={"device_name": summary.device_name}
    )
    update: LoopUpdate = {}
    if rule_for(state.options.decision_rule).checks_mechanisms:
        result = result.model_copy(update={"steps": summary.steps, "step_us": summary.step_us})
        update["mechanisms"] = mechanism_checks(state, summary)
    if summary.decode_phases is not None:
        result = result.model_copy(update={"decode_phases": summary.decode_phases})
    top = result.top_ops[0] if result.top_ops else None
    note = (
        f"top op {top.name} {top.input_dims} {top.share:.0%} of {summary.time_basis} time; "
        if top
        else "no ops in trace; "
    )
    note += "findings: " + (", ".join(f.playbook for f in result.findings) or "none")
    if result.decode_phases is not None:
        note += f"; {result.decode_phases.line()}"
    for m in update.get("mechanisms", []):
        note += f"; {m.playbook}: {m.note}"
    update |= {"diagnosis": result, "transitions": transition("diagnose", note)}
    return Command(update=update, goto="propose")


def mechanism_checks(state: LoopState, summary: ProfileSummary) -> list[MechanismCheck]:
    """Predicted vs realized for accepted patches not yet checked against a later profile (pure)."""
    done = {m.iteration for m in state.mechanisms}
    return [
        mechanism.check(
            d.iteration,
            d.source,
            d.prediction,
            summary,
            ms=state.options.mechanism_ms,
            by_range=state.options.mechanism_range,
        )
        for d in state.decisions
        if d.verdict == "accepted" and d.prediction is not None and d.iteration not in done
    ]
