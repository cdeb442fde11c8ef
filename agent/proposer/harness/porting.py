"""The eval's `sglang-port` task: the kv-cast patch ported to a real SGLang release it does not fit,
scored by the equivalence harness (pure, but for the door calls and the playbook files read).

The repo is a release's source unpacked from its wheel (tools/sglang/wheels.py). A real session
needs the release's server on a GPU, so the task is the model's part of one: `propose` as it runs
when the kv-cast playbook matched and its stored patch failed. The diagnosis is a profile shaped
like the playbook's reference case (GLM-5-NVFP4 on SGLang: 69% of the decode step in the copy of a
495,552-slot FP8 pool), pointing at the release's `forward_decode`; the stored patch for the newest
release is checked against the tree (`repo.check_patch`: it does not fit, and that is a `failed`
decision); then rounds of the model's conversation (`asking.ask_round`, which gives it the stored
patch to port) and, for each patch, `sglang.equivalence` (tools/sglang/porting.py): the backend's
decode path on CPU, unpatched vs patched, bit-identical outputs, only the batch's KV rows read. A
patch passing both is `accepted` and ends the task; else the next round is told why (a
`ModelTrial`), up to `max_proposals` rounds. Speed is not measured (no GPU). Every step goes
through the door, so `run` with a `ReplayDoor` over the recorded calls replays the task offline.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from agent.proposer.chat.asking import ask_round
from agent.proposer.harness.evaluation import NOT_MEASURED
from playbooks.engine import diagnose, load_playbooks
from playbooks.patches import read_patch, rebase_diff
from state.base import utcnow
from state.config.options import LoopOptions
from state.config.target import TargetConfig
from state.door.calls import ApplyArgs
from state.engines.sglang import EquivalenceArgs, SglangLayout
from state.profiling.diagnosis import DiagnosisContext
from state.profiling.profile import OpStat, ProfileSummary
from state.proposers.proposer import LlmUsage, ModelTrial
from state.sessions.loop import Decision, LoopState
from state.sessions.session import SessionInfo
from tools.door import Door
from tools.door.live import LiveDoor
from tools.door.replay import ReplayDivergence, ReplayDoor
from tools.errors import ConfigError, PatchError
from tools.sglang import porting
from tools.sglang.patches import does_not_fit
from tools.store.sessions import SessionStore
from tools.workspace import repo as repo_tools

PLAYBOOK = "kv-cache-full-pool-cast"
PACKAGE = "python/sglang"
BACKEND = f"{PACKAGE}/srt/layers/attention/flashinfer_mla_backend.py"
CAST = "get_key_buffer(layer.layer_id).to("
"""The full-pool cast in the release's `forward_decode` (the profile's call site)."""


def profile(repo: Path) -> ProfileSummary:
    """A decode profile shaped like the playbook's reference case, its cast called from the
    release's own `forward_decode` line (read from the tree before the task starts)."""
    lines = (repo / BACKEND).read_text().splitlines()
    line = next((k for k, text in enumerate(lines, 1) if CAST in text), 1)
    pool, steps, step_us = 495_552, 10, 95_600.0
    cast_op = OpStat(
        name="aten::copy_",
        calls=78 * steps,
        self_us=0.69 * step_us * steps,
        total_us=0.69 * step_us * steps,
        share=0.69,
        input_dims=[[pool, 1, 576], [pool, 1, 576], []],
        input_types=["c10::BFloat16", "c10::Float8_e4m3fn", "Scalar"],
        location=f"{repo}/{BACKEND}:{line} (forward_decode)",
    )
    mm = OpStat(
        name="aten::mm",
        calls=40 * steps,
        self_us=0.2 * step_us * steps,
        total_us=0.2 * step_us * steps,
        share=0.2,
    )
    return ProfileSummary(
        source="sglang-port task (the playbook's reference case)",
        time_basis="device",
        steps=steps,
        total_self_us=0.89 * step_us * steps,
        step_us=step_us,
        ops=[cast_op, mm],
    )


def initial(session_id: str, target: TargetConfig, version: str, options: LoopOptions) -> LoopState:
    """The state the task starts from: diagnosed, the release's layout known."""
    books = load_playbooks()
    ctx = DiagnosisContext(target_kind="sglang", active_tokens=4096, tpot_ms=95.6)
    return LoopState(
        session_id=session_id,
        target=target,
        options=options,
        diagnosis=diagnose(profile(target.repo), ctx, [b for b in books if b.id == PLAYBOOK]),
        sglang=SglangLayout(kind="checkout", package_dir=PACKAGE, version=version),
    )


def run(state: LoopState, door: Door) -> LoopState:
    """The task (see the module doc); its finished state, which `evaluation.score` scores."""
    door.node = "propose"
    runtime = cast(Runtime[LoopContext], Runtime(context=LoopContext(door=door)))
    books = [b for b in load_playbooks() if b.id == PLAYBOOK]
    layout, finding = need(state.sglang, "sglang"), need(state.diagnosis, "diagnosis").findings[0]
    stored = rebase_diff(read_patch(books[0], "sglang"), layout.package_dir)
    try:
        args = ApplyArgs(repo=state.target.repo, diff=stored, subject="check", trailers={})
        call(runtime, repo_tools.check_patch, args)
        why = "it applies (this release needs no port)"
    except PatchError as exc:
        why = str(does_not_fit(layout.version, stored, exc))
    state = _with(state, [Decision(iteration=state.iteration, source=PLAYBOOK, verdict="failed", reason=why)])
    for _ in range(state.target.proposer.max_proposals):
        out = ask_round(state, runtime, finding, books=books)
        state = _with(state, out.failed, usage=out.usage)
        for p in out.proposals:
            result = call(
                runtime,
                porting.equivalence,
                EquivalenceArgs(repo=state.target.repo, diff=p.diff, backend=BACKEND),
            )
            ok = bool(result.identical and result.active_rows_only)
            verdict = "accepted" if ok else ("rejected" if result.applied else "failed")
            reason = f"equivalence harness: {result.line}; speed {NOT_MEASURED}"
            decision = Decision(
                iteration=state.iteration,
                source=p.source,
                verdict=verdict,
                reason=reason,
                outputs_identical=result.identical,
            )
            told = ModelTrial(
                iteration=state.iteration,
                candidate=p.source,
                verdict=verdict,
                diff=p.diff,
                feedback=[f"{verdict}: {reason}"],
            )
            state = _with(state, [decision], trials=[] if ok else [told])
        if any(d.verdict == "accepted" for d in state.decisions if d.source != PLAYBOOK):
            break
    return state.model_copy(update={"status": "done"})


def _with(
    state: LoopState,
    decisions: Sequence[Decision],
    usage: LlmUsage | None = None,
    trials: Sequence[ModelTrial] = (),
) -> LoopState:
    """`state` with more decisions, model trials and usage (pure)."""
    update: dict[str, Any] = {
        "decisions": [*state.decisions, *decisions],
        "model_trials": [*state.model_trials, *trials],
    }
    if usage is not None:
        update["llm_usage"] = state.llm_usage.add(usage)
    return state.model_copy(update=update)


def recorded(store: SessionStore, state: LoopState, repo: Path) -> LoopState:
    """Run the task as session `state.session_id` of `store`: its index entry and initial state
    recorded, every call through a live door recording into it (what `--record` exports)."""
    info = SessionInfo(
        id=state.session_id,
        created_at=utcnow(),
        target_name=state.target.name,
        target_path=None,
        repo=repo,
        status="running",
        host=socket.gethostname(),
    )
    store.put_session(info)
    store.add_input(state.session_id, "initial", state.model_dump(mode="json"))
    final = run(state, LiveDoor(state.session_id, store))
    store.put_session(info.model_copy(update={"status": final.status}))
    return final


def replayed(store: SessionStore, session_id: str) -> LoopState:
    """The task run again from its recorded initial state with every call answered from the
    recording; ReplayDivergence at the first call that differs, or when calls are left over."""
    initial = store.inputs(session_id, "initial")
    if not initial:
        raise ConfigError(f"session {session_id} has no recorded initial state; it cannot be replayed")
    door = ReplayDoor(session_id, store.tool_calls(session_id), store.cut_launches(session_id))
    state = run(LoopState.model_validate(initial[0]), door)
    if door.unplayed():
        nxt = door.unplayed()[0]
        raise ReplayDivergence(
            f"the replay ended but the recording has {len(door.unplayed())} more call(s), next: {nxt.name}"
        )
    return state
