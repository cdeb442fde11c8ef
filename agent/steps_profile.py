"""Steps that find the bottleneck: profile the running server, diagnose, propose a patch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, call, host_dir, step, transition
from playbooks.engine import diagnose as run_diagnosis
from playbooks.engine import launch_conflict, load_playbooks, patch_text
from playbooks.launch import change_conflict, describe, edited_argv
from state.calls import FetchArgs, PathArgs, ProfileArgs, ProfileFiles
from state.diagnosis import DiagnosisContext
from state.loop import LoopState, ProfileResult, Proposal
from tools import profiling
from tools.errors import ConfigError
from tools.hosts import transfer
from tools.sglang.patches import sglang_patch


@step
def profile(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["diagnose", "abort"]]:
    """Take a profile by the session's method: the instrumentation trigger or /start_profile."""
    cfg, server = state.target.profile, state.server
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
        ),
    )
    if state.target.host.kind == "ssh":
        files = fetched(state, runtime, files, state.options.session_dir / "profiles" / pid)
    result = ProfileResult(iteration=state.iteration, method=cfg.method, **files.model_dump())
    note = f"{cfg.method} profile: {result.trace_path.name} ({result.active_tokens} active tokens)"
    return Command(update={"profiles": [result], "transitions": transition("profile", note)}, goto="diagnose")


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


def _playbooks(state: LoopState):
    books = load_playbooks(state.options.playbook_dirs)
    if state.options.builtin_playbooks:
        return books
    extra = {d.resolve() for d in state.options.playbook_dirs}
    return [b for b in books if Path(b.source_dir).resolve().parent in extra]


@step
def diagnose(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["propose", "abort"]]:
    """Rank ops by device (or CPU) self time and match the playbooks' signatures."""
    latest = state.profiles[-1]
    summary = call(runtime, profiling.read, PathArgs(path=latest.trace_path))
    ctx = DiagnosisContext(
        target_kind=state.target.kind,
        active_tokens=latest.active_tokens,
        tpot_ms=state.reference.tpot_ms.median,
    )
    result = run_diagnosis(summary, ctx, _playbooks(state))
    top = result.top_ops[0] if result.top_ops else None
    note = (
        f"top op {top.name} {top.input_dims} {top.share:.0%} of {summary.time_basis} time; "
        if top
        else "no ops in trace; "
    )
    note += "findings: " + (", ".join(f.playbook for f in result.findings) or "none")
    return Command(update={"diagnosis": result, "transitions": transition("diagnose", note)}, goto="propose")


def files_of(diff: str) -> list[str]:
    """Repo-relative paths a unified diff touches (pure)."""
    return sorted(set(re.findall(r"^\+\+\+ b/(\S+)", diff, flags=re.M)))


def target_patch(state: LoopState, book) -> str | None:
    """The playbook's patch for this target: by kind, and for SGLang by the checkout's release."""
    if state.target.kind == "sglang" and state.sglang is not None:
        if not any(k == "sglang" or k.startswith("sglang@") for k in book.patches):
            return None
        try:
            return sglang_patch(book.patches, Path(book.source_dir), state.sglang)[1]
        except ConfigError:  # no patch for this release: the finding is reported, not proposed
            return None
    return patch_text(book, state.target.kind)


def launch_fix(state: LoopState, book, books: dict) -> tuple[list[str] | None, str | None]:
    """(the launch command the playbook's launch change gives, None) or (None, why it is not
    proposed): no change for this kind, options already so, or a conflict with a patch in the tree
    or still to be tried."""
    edits = book.launch.get(state.target.kind)
    if not edits:
        return None, None
    before = state.argv
    after = edited_argv(before, edits)
    if after == before:
        return None, f"{book.id} (launch options already as its fix sets them)"
    relevant = {d.playbook for d in state.decisions if d.verdict == "accepted"}
    relevant |= {f.playbook for f in state.diagnosis.findings if f.playbook not in state.tried}
    conflict = change_conflict(state.target.kind, before, after, [books[i] for i in relevant if i in books])
    if conflict is not None:
        return None, f"{book.id} (not proposed: {conflict})"
    return after, None


@step
def propose(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["approve", "finish", "abort"]]:
    """Turn the best untried finding that has a fix for this target kind (a patch, or a change of
    the launch options) into a proposal."""
    books = {b.id: b for b in _playbooks(state)}
    skipped = []
    for finding in state.diagnosis.findings:
        book = books.get(finding.playbook)
        if book is None or finding.playbook in state.tried:
            continue
        argv, why = launch_fix(state, book, books)
        if why is not None:
            skipped.append(why)
            continue
        diff = "" if argv is not None else target_patch(state, book)
        if diff is None:
            skipped.append(f"{book.id} (no patch for kind {state.target.kind})")
            continue
        conflict = launch_conflict(book, state.target.kind, state.argv) if argv is None else None
        if conflict is not None:
            skipped.append(f"{book.id} (not proposed: {conflict})")
            continue
        proposal = Proposal(
            iteration=state.iteration,
            playbook=book.id,
            title=finding.title,
            explanation=finding.explanation,
            diff=diff,
            files=files_of(diff),
            expected_gain_share=finding.expected_gain_share,
            expected_gain_ms=finding.expected_gain_ms,
            evidence=finding.evidence,
            launch_argv=argv,
            predicted_speedup=finding.predicted_speedup,
            paired_with=finding.paired_with,
            paired_speedup=finding.paired_speedup,
        )
        return Command(
            update={
                "proposal": proposal,
                "approval": None,
                "transitions": transition("propose", _note(proposal, state)),
            },
            goto="approve",
        )
    reason = "no untried playbook matches the profile"
    generic = [f for f in state.diagnosis.findings if f.playbook == "generic"]
    if generic:
        reason += f"; top: {generic[0].title}"
    if skipped:
        reason += "; skipped " + ", ".join(skipped)
    return Command(
        update={"proposal": None, "stop_reason": reason, "transitions": transition("propose", reason)},
        goto="finish",
    )


def _note(p: Proposal, state: LoopState) -> str:
    """One line: the proposal, its expected gain, what it changes."""
    gain = (
        f"{p.expected_gain_ms:.1f} ms" if p.expected_gain_ms is not None else f"{p.expected_gain_share:.0%}"
    )
    if p.predicted_speedup is not None:
        gain += f" ({p.predicted_speedup:.2f}x predicted"
        gain += f"; {p.paired_speedup:.2f}x with {p.paired_with})" if p.paired_with else ")"
    what = (
        f"launch options: {describe(state.argv, p.launch_argv)}"
        if p.launch_argv is not None
        else f"touches {', '.join(p.files)}"
    )
    return f"{p.playbook}: expected gain {gain} per token, {what}"
