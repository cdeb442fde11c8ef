"""The plumbing under GitWorkspace: the one `git` call that turns GitCommandError into PatchError,
the current and session branch, scratch indexes, and applying a patch to index and worktree as a pair.
GitPython loads when a checkout is opened, not with the graph whose door tools name these classes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from state.engines.workspace import CommitInfo
from tools.errors import PatchError
from tools.workspace.commands import (
    APPLY,
    IDENTITY_ENV,
    SESSION_BRANCH_PREFIX,
    check_relpath,
    explain_git_error,
)


class GitPlumbing:
    """A git checkout, opened once; used as a context manager so its Repo is closed."""

    def __init__(self, path: Path) -> None:
        from git import InvalidGitRepositoryError, NoSuchPathError, Repo

        try:
            self.repo = Repo(path)
        except (InvalidGitRepositoryError, NoSuchPathError) as err:
            raise PatchError(
                f"{path} is not a git checkout; run `git init` there or pick the repo root"
            ) from err
        if self.repo.working_tree_dir is None:
            self.repo.close()
            raise PatchError(f"{path} is a bare repository; pick a checkout with a working tree")
        self.root = Path(self.repo.working_tree_dir).resolve()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the git helper processes GitPython keeps open."""
        self.repo.close()

    def _git(self, *args: str, hint: str | None = None, **kwargs: Any) -> Any:
        """Run `git ARGS` in the working tree; the one place GitCommandError becomes PatchError.

        `hint` replaces the generic advice of the error line; kwargs go to `Git.execute`.
        """
        from git import GitCommandError

        try:
            return self.repo.git.execute(["git", *args], **kwargs)
        except GitCommandError as err:
            raise PatchError(explain_git_error(args, str(err.stderr), hint)) from err

    def _ok(self, *args: str, **kwargs: Any) -> bool:
        """Whether `git ARGS` succeeds."""
        try:
            self._git(*args, **kwargs)
        except PatchError:
            return False
        return True

    def _path(self, relpath: str) -> Path:
        """Absolute path of a file inside the working tree (refusing .git/ and escapes)."""
        path = (self.root / check_relpath(relpath)).resolve()
        if not path.is_relative_to(self.root):
            raise PatchError(f"refusing path {relpath!r}: it resolves outside the repository; fix the path")
        return path

    def _branch(self) -> str | None:
        """The current branch name, None when HEAD is detached."""
        return (
            self._git("symbolic-ref", "--short", "-q", "HEAD")
            if self._ok("symbolic-ref", "-q", "HEAD")
            else None
        )

    def _session_branch(self) -> str:
        """The current branch, which must be a perfloop session branch."""
        branch = self._branch()
        if not branch or not branch.startswith(SESSION_BRANCH_PREFIX):
            raise PatchError(
                f"HEAD is on {branch or 'a detached commit'}, not a session branch;"
                " call ensure_branch('perfloop/<session>') first"
            )
        return branch

    @contextmanager
    def _scratch(self, diff: str) -> Iterator[tuple[str, dict[str, str]]]:
        """A temp patch file for `diff` and an env with a temporary GIT_INDEX_FILE and our identity."""
        with tempfile.TemporaryDirectory(prefix="perfloop-git-") as tmp:
            patch = Path(tmp, "patch.diff")
            patch.write_bytes((diff if diff.endswith("\n") else diff + "\n").encode())
            yield str(patch), {"GIT_INDEX_FILE": str(Path(tmp, "index")), **IDENTITY_ENV}

    def _commit_patch(self, commit: CommitInfo) -> str:
        """The exact diff a commit made against its first parent."""
        return self._git(
            "diff-tree",
            "-p",
            "--binary",
            "--full-index",
            commit.parent_sha,
            commit.sha,
            strip_newline_in_stdout=False,
        )

    def _commit_tree(
        self, patch: str, env: dict[str, str], message: str, parent: str, *, reverse: bool
    ) -> str:
        """A commit object: `parent`'s tree with the patch (or its reverse) applied; no ref moves."""
        self._git("read-tree", parent, env=env)
        self._git(*APPLY, "--cached", *(("-R",) if reverse else ()), patch, env=env)
        tree = self._git("write-tree", env=env)
        return self._git("commit-tree", "--no-gpg-sign", "-p", parent, "-m", message, tree, env=env)

    def _has(self, patch: str, target: tuple[str, ...]) -> bool:
        """Whether the patch is in the index (`--cached`) or working tree (); PatchError if neither fits."""
        if self._ok(*APPLY, "--check", "-R", *target, patch):
            return True
        self._git(*APPLY, "--check", *target, patch)
        return False

    def _targets(self, patch: str, *, present: bool) -> list[tuple[str, ...]]:
        """Index and/or working tree, where the patch's presence differs from `present`."""
        return [t for t in (("--cached",), ()) if self._has(patch, t) != present]

    def _apply_pair(self, patch: str, *, reverse: bool, targets: list[tuple[str, ...]]) -> None:
        """Apply (or reverse) the patch on each target: all checked first, done ones undone on failure."""
        sign, undo = (("-R",), ()) if reverse else ((), ("-R",))
        for target in targets:
            self._git(*APPLY, "--check", *sign, *target, patch)
        done: list[tuple[str, ...]] = []
        try:
            for target in targets:
                self._git(*APPLY, *sign, *target, patch)
                done.append(target)
        except PatchError:
            for target in done:
                self._git(*APPLY, *undo, *target, patch)
            raise
