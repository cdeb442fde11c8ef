"""The first user message: what a performance engineer would want to know before writing a patch.

The target and its launch command (secret options masked), the output policy the patch is judged
by, the profile's heaviest operators with per-step times and repo-relative call sites, the
findings with their evidence notes, predicted gain and what bounds the step, the hot source
lines, why matching playbooks were skipped, a stored patch to port when a playbook matched but its
patch does not fit this release, earlier attempts (the model's own with their diffs and what their
trials showed), the round's other candidates, and the answer asked for (edit blocks, or `LAUNCH:`
lines where the target takes launch options). Every piece from the target is `<data>`,
bounded and redacted (pure, but for the playbook patch files read).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from agent.context import need
from agent.proposer.briefing.prompt import attempt, clipped, data, repo_relative
from agent.proposer.edits.checks import path_problem
from playbooks.patches import NoPatch, choose_patch, read_patch, rebase_diff
from playbooks.schema import Playbook
from state.profiling.diagnosis import Diagnosis, Finding
from state.sessions.loop import LoopState, Proposal
from tools.llm.redact import redact, redact_argv

RELEASE = re.compile(r"^[a-z_]+@(\d+)\.(\d+)\.(\d+)$")
PORT_CHARS = 8000
"""How much of a stored patch to port the model is shown."""


def policy(state: LoopState) -> str:
    """The output gate the patch must pass, in words (pure)."""
    c = state.target.correctness
    if c.policy == "tolerance":
        return (
            "Output policy (tolerance): scored on the baseline's greedy continuations, the top-1 token "
            f"must agree on at least {c.min_top1_agreement:.1%} of positions and no token's log-probability "
            f"may move by more than {c.max_logprob_diff:g}; greedy outputs may differ slightly."
        )
    return (
        "Output policy (exact): the server's greedy outputs must stay bit-identical on the timing "
        f"prompts and {c.random_prompts} random prompts, alone and in a concurrent batch."
    )


def where(location: str | None, repo: Path) -> str:
    """A call site as the model should name it: repo-relative when inside the repo (pure)."""
    if not location:
        return "?"
    return location.replace(str(repo).rstrip("/") + "/", "") if repo_relative(location, repo) else location


def _per_step(us: float, steps: int | None) -> str:
    return f"{us / steps / 1000:.3f} ms per step" if steps else f"{us / 1000:.2f} ms in the profile"


def _finding(f: Finding, repo: Path, steps: int | None) -> str:
    lines = [f"- {f.title} (playbook: {f.playbook}, confidence {f.confidence:.1f})", f"  {f.explanation}"]
    for e in f.evidence:
        lines.append(
            f"  * {e.op} dims {e.dims}: {e.share:.1%} of time, {e.calls} calls, "
            f"{_per_step(e.self_us, steps)}, called from {where(e.location, repo)}"
        )
        if e.note:
            lines.append(f"    evidence: {e.note}")
    if f.roofline:
        lines.append(f"  roofline: {f.roofline.line}")
    if f.step_ms is not None and f.predicted_step_ms is not None:
        gain = f"  predicted: step {f.step_ms:.2f} -> {f.predicted_step_ms:.2f} ms"
        lines.append(gain + (f" ({f.predicted_speedup:.2f}x)" if f.predicted_speedup else ""))
    elif f.expected_gain_ms is not None:
        lines.append(f"  expected gain: {f.expected_gain_ms:.2f} ms per token")
    if f.bound:
        lines.append(
            f"  the step is bound by: {f.bound}"
            + (f" (after the fix: {f.bound_after})" if f.bound_after else "")
        )
    return "\n".join(lines)


def port_patch(state: LoopState, books: Sequence[Playbook]) -> tuple[str, str, str] | None:
    """(playbook, why it did not fit, its stored patch) for the first finding whose playbook has a
    patch for this kind that does not fit the target (no release key, or it failed to apply);
    None when there is none."""
    kind, failed = state.target.kind, {d.source for d in state.decisions if d.verdict == "failed"}
    by_id = {b.id: b for b in books}
    for f in need_findings(state):
        book = by_id.get(f.playbook)
        if book is None:
            continue
        keys = sorted((k for k in book.patches if k == kind or k.startswith(kind + "@")), key=_release)
        if not keys:
            continue
        diff = read_patch(book, keys[-1], state.options.playbook_files)
        if state.sglang is not None:
            diff = rebase_diff(diff, state.sglang.package_dir)
        if book.id in failed:
            why = next(d.reason for d in reversed(state.decisions) if d.source == book.id)
            return book.id, why, diff
        try:
            choose_patch(book, kind, state.sglang, state.options.playbook_files)
        except NoPatch as err:
            return book.id, err.reason, diff
    return None


def _release(key: str) -> tuple[int, ...]:
    m = RELEASE.match(key)
    return tuple(map(int, m.groups())) if m else (0, 0, 0)


def need_findings(state: LoopState) -> list[Finding]:
    return state.diagnosis.findings if state.diagnosis is not None else []


def ops_table(diagnosis: Diagnosis, repo: Path) -> str:
    """The heaviest operators, per-step times and repo-relative call sites (pure)."""
    return "\n".join(
        f"{k}. {op.name} dims {op.input_dims} types {op.input_types[:2]}: {op.share:.1%} of "
        f"{diagnosis.time_basis} self time, {op.calls} calls, {_per_step(op.self_us, diagnosis.steps)}, "
        f"called from {where(op.location, repo)}"
        for k, op in enumerate(diagnosis.top_ops, 1)
    )


def kernel_table(diagnosis: Diagnosis) -> list[str]:
    """The heaviest kernels, when decode ran in CUDA graphs (one `CUDA graph` row in the operator
    table hides them), as a heading and a data element; none otherwise (pure)."""
    if not diagnosis.kernels:
        return []
    rows = "\n".join(
        f"{k}. {kern.name[:160]}: {kern.share:.1%} of kernel time, {kern.calls} calls "
        f"({kern.graph_calls} inside CUDA graphs), {_per_step(kern.device_us, diagnosis.steps)}"
        for k, kern in enumerate(diagnosis.kernels, 1)
    )
    return ["Decode runs in CUDA graphs; the heaviest kernels inside them:", data("kernels", redact(rows))]


def context(
    state: LoopState,
    sources: dict[str, str],
    siblings: Sequence[Proposal] = (),
    skipped: Sequence[str] = (),
    port: tuple[str, str, str] | None = None,
) -> str:
    """The first user message (see the module doc)."""
    diagnosis, repo = need(state.diagnosis, "diagnosis"), state.target.repo
    tpot = state.reference.tpot_ms.median if state.reference else None
    step = f" One profiled decode step takes {diagnosis.step_us / 1000:.2f} ms." if diagnosis.step_us else ""
    parts = [
        f"Target kind: {state.target.kind}. Launch command: {' '.join(redact_argv(state.argv))}.",
        (f"Median time per output token (TPOT): {tpot:.2f} ms." if tpot else "") + step,
        policy(state),
        "Top operators of the decode step by self time:",
        data("profile", redact(ops_table(diagnosis, repo)) or "(no operators)"),
        *kernel_table(diagnosis),
        "Findings of the diagnosis (the first is the most promising):",
        data("findings", redact("\n".join(_finding(f, repo, diagnosis.steps) for f in diagnosis.findings))),
    ]
    for site, text in sources.items():
        parts += [f"Source around the hot call site {site}:", data("source", text)]
    if skipped:
        parts += [
            "Playbooks that matched but were not proposed, and why:",
            data("skipped", redact("\n".join(skipped))),
        ]
    if port is not None:
        book, why, diff = port
        parts += [
            f"Playbook {book} matched this profile, but its stored patch does not fit this target ({why}). "
            "Port it: make the same change in this tree's code.",
            data("patch-to-port", redact(clipped(diff, PORT_CHARS))),
        ]
    kept = [
        f"- {d.source} (iteration {d.iteration}): {d.reason}"
        + "".join(
            f"\n  mechanism check: {m.note}"
            for m in state.mechanisms
            if (m.iteration, m.playbook) == (d.iteration, d.source)
        )
        for d in state.decisions
        if d.verdict == "accepted"
    ]
    if kept:
        parts += ["Kept so far in this session (already in the tree):", data("kept", redact("\n".join(kept)))]
    tried = [d for d in state.decisions if d.verdict != "accepted"]
    if tried:
        earlier = "\n".join(f"- {d.source}: {d.verdict}: {d.reason}" for d in tried)
        parts += ["Already tried in this session (do not repeat these):", data("attempts", redact(earlier))]
    failed = [t for t in state.model_trials if t.kept_instead is None]
    if failed:
        parts += [
            "Your earlier patches in this session were tried and not kept. Learn from what their "
            "trials showed; do not send the same patch again (it would be refused):",
            data("your-attempts", redact("\n\n".join(attempt(t) for t in failed))),
        ]
    outpaced = [t for t in state.model_trials if t.kept_instead is not None]
    if outpaced:
        parts += [
            "Your earlier patches that were accepted on their host but not kept, because another "
            "candidate of the same round was faster and was kept instead (they are not in the tree; "
            "one may be sent again, to be tried on top of what was kept):",
            data("your-accepted", redact("\n\n".join(attempt(t) for t in outpaced))),
        ]
    if siblings:
        others = "\n\n".join(f"- {p.source}: {p.title}\n{clipped(p.diff)}" for p in siblings)
        parts += [
            "These candidates are already proposed for this round and will be tried at the same "
            "time on other hosts. Propose a different change (another place, another approach), "
            "not one of these:",
            data("candidates", others),
        ]
    parts.append(ask(state))
    return "\n\n".join(p for p in parts if p)


def ask(state: LoopState) -> str:
    """The message's last line: the answer asked for, edit blocks or (with `[proposer]
    launch_options`) `LAUNCH:` lines, only those when every file is protected (pure)."""
    cfg = state.target.proposer
    if not cfg.launch_options:
        return "Read what you need, then answer with your rationale and edit blocks."
    if all(path_problem(p, cfg.protected) for p in ("a.py", "a/b.py")):
        return (
            "The code is off limits here (every file is protected): read what you need, then answer "
            "with your rationale and LAUNCH: lines."
        )
    return (
        "Read what you need, then answer with your rationale and either edit blocks (a code fix) "
        "or LAUNCH: lines (a launch-option fix)."
    )
