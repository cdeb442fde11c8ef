"""A model's answer that changes the launch command instead of the code (pure).

Some fixes are launch options (a KV pool sized to the workload, CUDA graphs left on): the model
answers with a short rationale and one `LAUNCH:` line per change instead of edit blocks:

    LAUNCH: set --max-total-tokens 4096
    LAUNCH: set --enable-something        (a bare flag)
    LAUNCH: drop --disable-cuda-graph

`launch_answer` turns such an answer into the candidate's launch command (the session's current
one with the changes made), or the reason it cannot be used, written for the model. The candidate
is then a `Proposal` with `launch_argv` and no diff, tried like a playbook's launch fix.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from playbooks.engine import flag_value
from playbooks.flags import fixed_problem, flag_problem
from playbooks.launch import describe, with_flag, without_flag
from state.profiling.diagnosis import Finding
from state.proposers.proposer import LlmOrigin, ModelTrial
from state.sessions.loop import LoopState, Proposal
from tools.llm.redact import is_secret_option

_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_.-]*")
_LINE = re.compile(r"^\s*[`*]*LAUNCH:[`*]*\s+(?P<rest>.*?)\s*`*\s*$", re.M)


@dataclass(frozen=True)
class LaunchAnswer:
    """A launch-option answer that passed the checks."""

    argv: list[str]
    rationale: str
    change: str
    """One line: what changes (`--max-total-tokens 24576 -> 4096`)."""


def is_launch_answer(answer: str) -> bool:
    """Whether the answer holds `LAUNCH:` lines (then it is judged as a launch change) (pure)."""
    return _LINE.search(answer) is not None


def _edit(argv: list[str], rest: str, kind: str | None, extra: Sequence[str]) -> list[str] | str:
    """argv with one `set`/`drop` line applied, or the reason it cannot be: only a flag of the
    kind's allowlist or the target's `launch_flags`, spelled in full, its value not starting with
    `-` (playbooks/flags.py) (pure)."""
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        return f"`LAUNCH: {rest}` cannot be read: {exc}"
    if not words or words[0] not in ("set", "drop"):
        return f"`LAUNCH: {rest}`: write `LAUNCH: set --flag [value]` or `LAUNCH: drop --flag`"
    action, args = words[0], words[1:]
    if kind is None and args and "=" in args[0] and args[0].startswith("--"):  # before the allowlist
        args = args[0].split("=", 1) + args[1:]
    if not args or not args[0].startswith("--") or len(args) > 2 or (action == "drop" and len(args) > 1):
        return f"`LAUNCH: {rest}`: name one flag starting with `--`" + (
            ", and at most one value" if action == "set" else ", without a value"
        )
    flag = args[0]
    if is_secret_option(flag):  # masked in the prompt: never seen
        return f"`LAUNCH: {rest}`: {flag} is not yours to change (it holds a secret)"
    if kind is None:  # a session recorded before the allowlist: any flag but the fixed ones
        problem = fixed_problem(flag) or (None if _FLAG.fullmatch(flag) else f"{flag!r} is not a flag")
    else:
        problem = flag_problem(kind, flag, args[1] if len(args) == 2 else None, extra)
    if problem:
        return f"`LAUNCH: {rest}`: {problem}"
    if action == "drop":
        if flag_value(argv, flag) is None:
            return f"`LAUNCH: {rest}`: {flag} is not in the launch command"
        return without_flag(argv, flag)
    if len(args) == 2:
        return with_flag(argv, flag, args[1])
    return argv if flag_value(argv, flag) == "" else [*without_flag(argv, flag), flag]


def launch_answer(
    answer: str,
    argv: list[str],
    tried: Sequence[ModelTrial],
    siblings: Sequence[Proposal] = (),
    *,
    kind: str | None,
    extra: Sequence[str] = (),
) -> LaunchAnswer | str:
    """The launch command the answer asks for, or why it cannot be used: a flag outside the target
    `kind`'s allowlist and `extra` (`[proposer] launch_flags`; None: a session recorded before the
    allowlist, `LoopOptions.launch_allowlist`, where only fixed flags and their prefixes are refused), no change, one already tried in
    this session and not accepted, or one another host is trying in this round (pure)."""
    new = list(argv)
    for m in _LINE.finditer(answer):
        done = _edit(new, m["rest"], kind, extra)
        if isinstance(done, str):
            return done
        new = done
    if new == argv:
        return "your LAUNCH lines change nothing in the launch command as it is now"
    same = next((t for t in tried if t.kept_instead is None and t.launch_argv == new), None)
    if same is not None:
        return (
            f"this launch command is the same as your candidate {same.candidate} of iteration "
            f"{same.iteration}, already tried ({same.feedback[0] if same.feedback else same.verdict}): "
            "it was not launched again; propose a different change"
        )
    twin = next((p for p in siblings if p.launch_argv == new), None)
    if twin is not None:
        return (
            f"this launch command is the same as candidate {twin.source}, which another host is "
            "already trying: propose a different change"
        )
    rationale = _LINE.sub("", answer).strip()
    return LaunchAnswer(argv=new, rationale=rationale, change=describe(argv, new))


def as_proposal(found: LaunchAnswer, state: LoopState, finding: Finding, origin: LlmOrigin) -> Proposal:
    """The candidate of a launch-option answer: no diff, the changed launch command (pure)."""
    first = next((ln.strip("# ").strip() for ln in found.rationale.splitlines() if ln.strip()), "")
    return Proposal(
        iteration=state.iteration,
        source="llm",
        title=first[:100] or f"model-chosen launch options: {found.change}",
        explanation=found.rationale or "(the model gave no rationale)",
        diff="",
        files=[],
        expected_gain_share=finding.expected_gain_share,
        expected_gain_ms=finding.expected_gain_ms,
        evidence=finding.evidence,
        launch_argv=found.argv,
        proposer="llm",
        origin=origin,
    )
