"""The proposer's validation chain: a model's answer becomes a patch only if every check passes.

parse -> path allowlist -> each SEARCH matches exactly once (whitespace-tolerant, `matching`) ->
apply in memory -> Python still parses -> no new serious pyflakes finding (an undefined name) ->
`git apply --check` (through the door, where the repo lives). Each check is a function of the
candidate that returns None or the reason, written for the model; `validate` runs them in
order and stops at the first failure. A shared patch gate can be added as one more check
(`extra`), without changing the others.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from agent.proposer.edits.blocks import Block, EditError, apply_blocks, parse, unified_diff
from state.engines.workspace import PatchPolicy
from tools.errors import PatchError
from tools.workspace.patch_check import scan_patch

INSTRUMENTATION_MARKS = ("perfloop-instrumentation", "_perfloop_profiled")


@dataclass
class Candidate:
    """What the chain knows about an answer so far."""

    answer: str
    blocks: list[Block] = field(default_factory=list)
    rationale: str = ""
    old: dict[str, str | None] = field(default_factory=dict)
    new: dict[str, str] = field(default_factory=dict)
    diff: str = ""

    @property
    def files(self) -> list[str]:
        return sorted({b.path for b in self.blocks})


@dataclass(frozen=True)
class Failure:
    """Why an answer was refused: the check that failed and the reason for the model."""

    stage: str
    reason: str


Check = Callable[[Candidate], str | None]


def gate_problem(diff: str, max_bytes: int) -> str | None:
    """Why the patch gate's pure rules (tools/workspace/patch_check.py) refuse the patch built from
    a model's edits, written for the model (a hidden character, the size cap), or None (pure)."""
    try:
        scan_patch(diff, PatchPolicy(max_bytes=max_bytes))
    except PatchError as exc:
        return f"the patch built from your edits is refused by perfloop's patch gate: {exc}"
    return None


def path_problem(path: str, protected: Sequence[str]) -> str | None:
    """Why a model may not edit `path`, or None (pure)."""
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or path.startswith("~"):
        return f"{path!r} is outside the repository: paths must be relative to the repo root"
    if any(part.lower() == ".git" for part in p.parts):
        return f"{path!r} is inside .git: edit source files only"
    for pattern in protected:
        if fnmatch.fnmatch(path, pattern) or (
            pattern.startswith("**/") and fnmatch.fnmatch(path, pattern[3:])
        ):
            return (
                f"{path!r} is protected ({pattern}): tests, benchmarks and the harness are not to be edited"
            )
    return None


def check_paths(protected: Sequence[str]) -> Check:
    """Every block's path is inside the repo, outside .git and not protected; no block touches the
    profiler instrumentation."""

    def check(c: Candidate) -> str | None:
        for b in c.blocks:
            problem = path_problem(b.path, protected)
            if problem:
                return f"block {b.index}: {problem}"
            if any(mark in b.search + b.replace for mark in INSTRUMENTATION_MARKS):
                return (
                    f"block {b.index}: it touches perfloop's profiler instrumentation "
                    "(perfloop-instrumentation lines), which is not part of the code to optimize"
                )
        return None

    return check


def check_python(c: Candidate) -> str | None:
    """Every edited .py file still parses."""
    for path, text in sorted(c.new.items()):
        if not path.endswith(".py"):
            continue
        try:
            ast.parse(text, filename=path)
        except SyntaxError as exc:
            lines = text.splitlines()
            n = exc.lineno or 1
            near = "\n".join(f"{k}\t{lines[k - 1]}" for k in range(max(n - 2, 1), min(n + 2, len(lines)) + 1))
            return f"after your edits {path} does not parse: {exc.msg} at line {n}:\n{near}"
    return None


SERIOUS = (
    "UndefinedName",
    "UndefinedLocal",
    "UndefinedExport",
    "DuplicateArgument",
    "ReturnOutsideFunction",
    "YieldOutsideFunction",
    "ContinueOutsideLoop",
    "BreakOutsideLoop",
)
"""pyflakes findings that fail a candidate (they would crash the server); unused names do not."""


def _flakes(text: str, path: str) -> list[tuple[str, int, str]]:
    """(kind, line, message) of the serious pyflakes findings in a Python text (pure)."""
    from pyflakes.checker import Checker

    found = Checker(ast.parse(text, filename=path), filename=path).messages
    return [
        (type(m).__name__, m.lineno, m.message % m.message_args) for m in found if type(m).__name__ in SERIOUS
    ]


def check_static(c: Candidate) -> str | None:
    """No edited .py file gains a serious pyflakes finding (an undefined name, ...): a server
    relaunch is too dear a way to find it. Findings the file already had do not count."""
    for path, text in sorted(c.new.items()):
        if not path.endswith(".py"):
            continue
        old = c.old.get(path)
        before = {(k, msg) for k, _, msg in _flakes(old, path)} if old else set()
        new = [(n, msg) for k, n, msg in _flakes(text, path) if (k, msg) not in before]
        if new:
            lines = text.splitlines()
            return f"after your edits {path} has problems a static check finds:\n" + "\n".join(
                f"line {n}: {msg}: {lines[n - 1].strip() if 0 < n <= len(lines) else ''}"
                for n, msg in new[:5]
            )
    return None


def validate(
    answer: str,
    read_texts: Callable[[list[str]], dict[str, str | None]],
    protected: Sequence[str],
    git_check: Check,
    extra: Sequence[tuple[str, Check]] = (),
) -> Candidate | Failure:
    """Run the chain on an answer; the candidate with its diff, or the first failure."""
    c = Candidate(answer=answer)
    try:
        c.blocks, c.rationale = parse(answer)
    except EditError as exc:
        return Failure("parse", str(exc))
    problem = check_paths(protected)(c)
    if problem:
        return Failure("path", problem)
    c.old = read_texts(c.files)
    try:
        c.new = apply_blocks(c.blocks, c.old)
    except EditError as exc:
        return Failure("match", str(exc))
    c.diff = unified_diff(c.old, c.new)
    if not c.diff:
        return Failure("apply", "the edits change nothing: REPLACE equals SEARCH")
    for stage, check in (("python", check_python), ("static", check_static), *extra, ("git", git_check)):
        problem = check(c)
        if problem:
            return Failure(stage, problem)
    return c
