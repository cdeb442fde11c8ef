"""Values that cross the git-workspace boundary: commits, snapshots, instrumentation records."""

from pathlib import Path

from pydantic import Field

from state.base import Model


class CommitInfo(Model):
    """One commit perfloop made on a session branch."""

    sha: str = Field(description="Full 40-hex object name of the commit.")
    branch: str = Field(description="Branch the commit is on, e.g. 'perfloop/s1' (no refs/heads/).")
    subject: str = Field(description="First line of the commit message.")
    trailers: dict[str, str] = Field(
        description="Trailers of the message, e.g. {'Perfloop-Session': 's1'}; last value wins."
    )
    parent_sha: str = Field(description="Full object name of the commit's first parent.")


class WorkspaceSnapshot(Model):
    """What a checkout looks like at one moment: compare two to prove nothing changed."""

    path: str = Field(description="Absolute path of the working tree's top-level directory.")
    head_sha: str = Field(description="Full object name HEAD points to.")
    branch: str | None = Field(description="Current branch name, or None when HEAD is detached.")
    dirty_sha256: dict[str, str | None] = Field(
        description=(
            "Every path git status reports (staged, unstaged or untracked; relative, '/'-separated)"
            " -> sha256 hex of its working-tree bytes, or None when deleted from the working tree."
        )
    )
    staged_diff_sha256: str = Field(description="sha256 hex of `git diff --cached --binary` (index vs HEAD).")
    unstaged_diff_sha256: str = Field(
        description="sha256 hex of `git diff --binary` (working tree vs index)."
    )
    head_tree_sha: str | None = Field(
        None, description="Object name of HEAD's tree (content only; None in older recordings)."
    )


class InstrumentationRecord(Model):
    """The profiler hunks perfloop added to one file, enough to remove exactly those."""

    relpath: str = Field(description="Path of the instrumented file, relative to the repo root.")
    pre_sha256: str = Field(description="sha256 hex of the file's bytes before instrumentation.")
    post_sha256: str = Field(description="sha256 hex of the file's bytes right after it.")
    diff: str = Field(description="The exact unified diff (git format) that was applied.")
    marker_id: str = Field(description="Comment text every inserted line carries.")


class PatchPolicy(Model):
    """What the patch gate lets through, beside its fixed rules (regular files inside the repository,
    no absolute paths, no `..`, no `.git/`, no symlinks, no mode changes beyond the executable bit)."""

    max_bytes: int = Field(1024 * 1024, ge=1, description="Largest patch accepted, in bytes of UTF-8 text.")
    allow_binary: bool = Field(
        False, description="Whether binary hunks pass: only for a playbook that declares them."
    )


class ReferenceCopyArgs(Model):
    """Check the reference tree out beside the target checkout (interleaved arms)."""

    repo: Path = Field(description="The target checkout (its HEAD is the candidate commit).")
    dest: Path = Field(description="Where the reference copy goes (a linked git worktree).")
    commit: str = Field(description="The reference commit: the candidate commit's parent.")


class RemoveCopyArgs(Model):
    """Remove a reference copy made by `repo.reference_copy` (nothing if it is gone)."""

    repo: Path = Field(description="The target checkout the copy was made from.")
    dest: Path = Field(description="The copy.")
