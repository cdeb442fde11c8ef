"""Pure parts of the git workspace: constants, validation, commit messages, log and error parsing."""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath

from state.engines.workspace import CommitInfo
from tools.errors import PatchError

IDENTITY_ENV = {
    "GIT_AUTHOR_NAME": "perfloop",
    "GIT_AUTHOR_EMAIL": "perfloop@localhost",
    "GIT_COMMITTER_NAME": "perfloop",
    "GIT_COMMITTER_EMAIL": "perfloop@localhost",
}
SESSION_BRANCH_PREFIX = "perfloop/"
REVERTS_TRAILER = "Perfloop-Reverts"
APPLY = ("apply", "--whitespace=nowarn")  # overrides a user's apply.whitespace=fix
LOG_FORMAT = "--format=%H%x1f%P%x1f%s%x1f%(trailers:only,unfold)%x1e"
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
_FAILED_AT = re.compile(r"patch failed: ([^\n']+):(\d+)")
_ERROR = re.compile(r"(?:error|fatal): ([^\n]+)")


def sha256_hex(data: bytes) -> str:
    """sha256 of bytes as 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def apply_context(min_context: int | None) -> tuple[str, ...]:
    """git apply's -C option, or nothing for git's default (all context lines must match)."""
    return () if min_context is None else (f"-C{min_context}",)


def check_relpath(path: str) -> str:
    """Return `path` if it names a file inside a repository and outside `.git/`; else PatchError."""
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts or any(p.lower() == ".git" for p in parts):
        raise PatchError(
            f"refusing path {path!r}: patches may only touch files inside the repository,"
            " outside .git/; fix the diff's paths"
        )
    return path


def check_trailers(trailers: dict[str, str]) -> None:
    """PatchError unless there is at least one trailer and each is `Key-With-Dashes: one-line value`."""
    if not trailers:
        raise PatchError(
            "perfloop commits are found by their trailers (e.g. Perfloop-Session); pass at least one"
        )
    for key, value in trailers.items():
        if not _TRAILER_KEY.fullmatch(key) or not value or value != value.strip() or "\n" in value:
            raise PatchError(f"bad trailer {key!r}: {value!r}; use Key-With-Dashes and a one-line value")


def commit_message(subject: str, trailers: dict[str, str]) -> str:
    """The message of a perfloop commit: one subject line, a blank line, `Key: value` trailers."""
    if not subject.strip() or "\n" in subject:
        raise PatchError("commit subject must be one non-empty line; shorten the patch title")
    check_trailers(trailers)
    return subject.strip() + "\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers.items())


def parse_log(text: str, branch: str) -> list[CommitInfo]:
    """Parse `git log` output written with `LOG_FORMAT`, newest first."""
    commits = []
    for record in filter(str.strip, text.split("\x1e")):
        sha, parents, subject, block = record.lstrip("\n").split("\x1f")
        pairs = (line.split(": ", 1) for line in block.splitlines() if ": " in line)
        commits.append(
            CommitInfo(
                sha=sha,
                branch=branch,
                subject=subject,
                trailers=dict(pairs),
                parent_sha=(parents.split() or [""])[0],
            )
        )
    return commits


def explain_git_error(args: tuple[str, ...], stderr: str, hint: str | None = None) -> str:
    """One actionable line for a failed git command, naming the file and line when git does."""
    flags = " ".join(a for a in args if a.startswith("-") and a != "--whitespace=nowarn")
    failed = _FAILED_AT.search(stderr)
    if failed:
        return (
            f"patch does not apply: {failed[1]}:{failed[2]} (git apply {flags});"
            " regenerate the diff against the current file"
        )
    detail = _ERROR.search(stderr)
    lines = [line.strip(" '") for line in stderr.splitlines() if line.strip(" '")]
    reason = detail[1].rstrip("'") if detail else (lines[-1] if lines else "no message")
    reason += "".join(f" {line.strip()}" for line in stderr.splitlines() if line.startswith("\t"))
    if hint:
        return f"{hint} (git {args[0]}: {reason})"
    if args[0] == "apply":
        return f"patch does not apply: {reason} (git apply {flags}); regenerate the diff against the current file"
    return f"git {args[0]} failed: {reason}; check the repository state and retry"
