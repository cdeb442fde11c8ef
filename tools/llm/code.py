"""The model's read-only look at the target repo: `read_file`, `grep`, `list_dir`.

Run where the repo lives (`where="host"`). Paths are repo-relative; anything outside the repo (also
through a symlink, for every tool, `grep` included), inside `.git`, gitignored or secret-looking
(`redact.secret_file`) is refused with a reason the model reads, or left out of listings and
searches; `.git` is never reached, also through a symlink into it (the resolved path is checked);
a path the file system cannot take (a NUL byte, a name too long) is refused too; what is sent back
has secrets masked (`redact.redact`); `grep` runs the model's pattern with the `regex` package
under a real time limit (`GREP_SECONDS` in all: a catastrophic pattern is stopped, not waited
for). Lines perfloop's
profiler instrumentation added (marked `# perfloop-instrumentation`) are left out: the model sees
the tree as it will be when its patch is applied, after the instrumentation is removed.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import regex  # type: ignore[import-untyped]

from state.proposers.llm_tools import CodeArgs, CodeResult, DiffArgs, FilesArgs, FileTexts, LogArgs
from tools.door import tool
from tools.errors import PatchError
from tools.hosts.local import tail
from tools.llm.redact import redact, secret_file
from tools.workspace.commands import APPLY
from tools.workspace.git import GitWorkspace

MARKER = "perfloop-instrumentation"
MAX_LINES = 600
MAX_CHARS = 60_000
MAX_MATCHES = 200
MAX_FILE_BYTES = 2_000_000
GREP_SECONDS = 10.0
"""Wall time one grep may take; past it, the matches so far and a note."""
SKIP_DIRS = {".git", "__pycache__", ".venv", "node_modules", ".mypy_cache", ".pytest_cache"}


class Refused(Exception):
    """A request the model made that is not allowed or cannot be answered."""


def resolve(repo: Path, path: str) -> Path:
    """`path` inside `repo`, not in `.git`; Refused otherwise."""
    if not path.isprintable():
        raise Refused(f"{path!r} holds a control character (a NUL byte?): not a path")
    rel = PurePosixPath(path.strip() or ".")
    if rel.is_absolute() or ".." in rel.parts:
        raise Refused(f"{path!r} is outside the repository: use a path relative to its root")
    if any(p.lower() == ".git" for p in rel.parts):
        raise Refused(f"{path!r} is inside .git, which is not readable")
    root = repo.resolve()
    full = (root / rel).resolve()
    if full != root and root not in full.parents:
        raise Refused(f"{path!r} leads outside the repository")
    if in_git(root, full):
        raise Refused(f"{path!r} leads into .git (a symlink), which is not readable")
    if not full.exists():
        raise Refused(f"{path!r} does not exist")
    if any(secret_file(p) for p in (*rel.parts, full.name)):
        raise Refused(f"{path!r} looks like it holds secrets: not readable")
    if full != root and ignored(root, [full]):
        raise Refused(f"{path!r} is ignored by git: not readable")
    return full


def in_git(root: Path, real: Path) -> bool:
    """Whether `real` (resolved) lies in the repo's `.git` (pure)."""
    try:
        return any(part.lower() == ".git" for part in real.relative_to(root).parts)
    except ValueError:
        return False


def inside(root: Path, p: Path) -> bool:
    """Whether `p`, symlinks resolved, is `root` or under it."""
    real = p.resolve()
    return real == root or root in real.parents


def ignored(root: Path, paths: list[Path]) -> set[Path]:
    """The paths git ignores in the repo at `root` (untracked and matched by .gitignore & co.)."""
    if not paths:
        return set()
    rels = [p.resolve().relative_to(root).as_posix() for p in paths]
    proc = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "--stdin", "-z"],
        input="\0".join(rels) + "\0",
        capture_output=True,
        text=True,
    )
    hit = {r for r in proc.stdout.split("\0") if r}
    return {p for p, r in zip(paths, rels, strict=True) if r in hit}


def _hidden(root: Path, p: Path) -> bool:
    """Whether a listing or a search leaves `p` out: outside through a symlink, or secret-looking."""
    return not inside(root, p) or in_git(root, p.resolve()) or secret_file(p.name) or p.name in SKIP_DIRS


def visible_lines(text: str) -> list[str]:
    """The file's lines without the instrumentation's marked lines (pure)."""
    return [line for line in text.splitlines() if MARKER not in line]


def _text(full: Path) -> str:
    if full.stat().st_size > MAX_FILE_BYTES:
        raise Refused(f"{full.name} is larger than {MAX_FILE_BYTES} bytes")
    try:
        return full.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise Refused(f"{full.name} is not a UTF-8 text file") from None


def visible_line(text: str, traced: int) -> int:
    """Line `traced` of the file as it ran (instrumentation included) in the visible numbering (pure)."""
    hidden = sum(MARKER in line for line in text.splitlines()[: max(traced - 1, 0)])
    return max(traced - hidden, 1)


def read_file(
    repo: Path, path: str, start: int | None, end: int | None, around: int | None = None, context: int = 6
) -> str:
    """Numbered lines `start..end` (1-based, inclusive) of a file (`N<TAB>line`); with `around`,
    `context` lines either side of that line of the file as it was traced."""
    full = resolve(repo, path)
    if full.is_dir():
        raise Refused(f"{path!r} is a directory: use list_dir")
    text = _text(full)
    if around is not None:
        line = visible_line(text, around)
        start, end = max(line - context, 1), line + context
    lines = visible_lines(text)
    first = max(start or 1, 1)
    last = min(end or len(lines), len(lines), first + MAX_LINES - 1)
    body = "\n".join(f"{n}\t{lines[n - 1]}" for n in range(first, last + 1))
    more = f"\n[{len(lines) - last} more lines: read from line {last + 1}]" if last < len(lines) else ""
    return f"{path} (lines {first}-{last} of {len(lines)})\n{body[:MAX_CHARS]}{more}"


def _files(root: Path, full: Path) -> list[Path]:
    """The files a search under `full` reads: inside the repo (symlinks resolved), not under a
    skipped, secret-looking or gitignored path."""
    if full.is_file():
        return [full]
    found = []
    for p in sorted(full.rglob("*")):
        rel = p.relative_to(root).parts
        if any(part in SKIP_DIRS or secret_file(part) for part in rel) or _hidden(root, p):
            continue
        if p.is_file():
            found.append(p)
    gone = ignored(root, found)
    return [p for p in found if p not in gone]


def grep(repo: Path, pattern: str, path: str) -> str:
    """`file:line: text` for every line matching a Python regex under `path`."""
    try:
        rx = regex.compile(pattern)
    except (regex.error, ValueError, OverflowError) as exc:
        raise Refused(f"bad regular expression {pattern!r}: {exc}") from None
    root = repo.resolve()
    hits: list[str] = []
    deadline = time.monotonic() + GREP_SECONDS
    stopped = f"[stopped after {GREP_SECONDS:.0f} s: narrow the pattern or path]"
    for f in _files(root, resolve(repo, path)):
        try:
            lines = visible_lines(_text(f))
        except Refused:
            continue
        rel = f.relative_to(root).as_posix()
        try:
            for n, line in enumerate(lines, 1):
                if rx.search(line, timeout=max(deadline - time.monotonic(), 0.001)):
                    hits.append(f"{rel}:{n}: {line}")
        except TimeoutError:
            hits.append(stopped)
            break
        if len(hits) > MAX_MATCHES:
            break
        if time.monotonic() > deadline:
            hits.append(stopped)
            break
    if not hits:
        return f"no match for {pattern!r} under {path}"
    extra = (
        f"\n[more than {MAX_MATCHES} matches: narrow the pattern or path]" if len(hits) > MAX_MATCHES else ""
    )
    return "\n".join(hits[:MAX_MATCHES])[:MAX_CHARS] + extra


def list_dir(repo: Path, path: str) -> str:
    """The folder's entries, folders with a trailing `/`."""
    full = resolve(repo, path)
    if not full.is_dir():
        raise Refused(f"{path!r} is a file: use read_file")
    root = repo.resolve()
    entries = [p for p in sorted(full.iterdir()) if not _hidden(root, p)]
    gone = ignored(root, entries)
    names = [p.name + ("/" if p.is_dir() else "") for p in entries if p not in gone]
    return "\n".join(names) or "(empty)"


def _answer(fn: Callable[..., str], *args: Any) -> CodeResult:
    try:
        return CodeResult(ok=True, text=redact(fn(*args)))
    except Refused as exc:
        return CodeResult(ok=False, text=redact(f"refused: {exc}"))
    except (OSError, ValueError) as exc:  # what the file system refuses: an answer, never a crash
        return CodeResult(ok=False, text=redact(f"refused: {type(exc).__name__}: {exc}"))


@tool("code.read_file")
def read_file_tool(args: CodeArgs) -> CodeResult:
    """read_file(path, start_line?, end_line?) for the model."""
    return _answer(read_file, args.repo, args.path, args.start_line, args.end_line, args.traced_line)


@tool("code.grep")
def grep_tool(args: CodeArgs) -> CodeResult:
    """grep(pattern, path?) for the model."""
    return _answer(grep, args.repo, args.pattern or "", args.path)


@tool("code.list_dir")
def list_dir_tool(args: CodeArgs) -> CodeResult:
    """list_dir(path?) for the model."""
    return _answer(list_dir, args.repo, args.path)


@tool("code.log_tail")
def log_tail(args: LogArgs) -> CodeResult:
    """The last lines of a server log perfloop wrote (a crashed candidate's traceback), secrets
    masked; not ok when the log is missing or empty."""
    text = tail(args.path, args.lines)
    return CodeResult(ok=bool(text.strip()), text=redact(text) if text.strip() else f"no log at {args.path}")


@tool("code.read_texts")
def read_texts(args: FilesArgs) -> FileTexts:
    """The text of each file as it will be when a patch applies (instrumentation lines left out,
    line endings kept): what the edit checks match against. None for a missing or refused file."""
    out: dict[str, str | None] = {}
    for rel in args.paths:
        try:
            full = resolve(args.repo, rel)
            out[rel] = (
                "".join(line for line in _text(full).splitlines(keepends=True) if MARKER not in line)
                if full.is_file()
                else None
            )
        except Refused:
            out[rel] = None
    return FileTexts(texts=out)


@tool("code.check_diff")
def check_diff(args: DiffArgs) -> CodeResult:
    """`git apply --check` of a model's diff against the tree it will meet when applied: the index,
    HEAD, and the working tree without perfloop's instrumentation (its touched files copied, marked
    lines left out, into a scratch folder outside any repository)."""
    try:
        with GitWorkspace(args.repo) as ws:
            files = ws.changed_files(args.diff)
            ws.check_patch(args.diff, worktree=False)
        texts = read_texts(FilesArgs(repo=args.repo, paths=files)).texts
        with tempfile.TemporaryDirectory(prefix="perfloop-check-") as tmp:
            for rel, text in texts.items():
                if text is not None:
                    (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                    (Path(tmp) / rel).write_text(text, encoding="utf-8")
            env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(tmp).parent)}
            proc = subprocess.run(
                ["git", *APPLY, "--check", "-"],
                cwd=tmp,
                input=args.diff,
                text=True,
                capture_output=True,
                env=env,
            )
        if proc.returncode != 0:
            return CodeResult(
                ok=False, text=proc.stderr.strip().replace(tmp + "/", "") or "git apply --check failed"
            )
    except PatchError as exc:
        return CodeResult(ok=False, text=str(exc))
    return CodeResult(ok=True, text=f"applies: {', '.join(files)}")
