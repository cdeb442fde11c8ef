"""A target checkout under git: patches become commits on a session branch; nothing of the user's is lost.

Commits are built in a temporary index from HEAD's tree, so they hold only the patch; the patch is
then applied to the real index and the working tree, so `git status` still shows exactly the user's
own changes. `git checkout`, `git stash` and `git reset` are never run. Every git call goes through
`GitWorkspace._git`, the one place where `GitCommandError` becomes `PatchError`.
Commits (ours and the initial one of `create_from_tree`) use the identity "perfloop <perfloop@localhost>".
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from state.engines.workspace import CommitInfo, WorkspaceSnapshot
from tools.door.faults import fault_point
from tools.errors import PatchError
from tools.workspace.commands import (
    APPLY,
    IDENTITY_ENV,
    LOG_FORMAT,
    REVERTS_TRAILER,
    apply_context,
    check_relpath,
    check_trailers,
    commit_message,
    parse_log,
    sha256_hex,
)
from tools.workspace.plumbing import GitPlumbing


class GitWorkspace(GitPlumbing):
    """One target checkout: snapshots, the session branch, patches as commits, reverts."""

    @classmethod
    def create_from_tree(cls, src: Path, dest: Path) -> GitWorkspace:
        """Copy `src` (without __pycache__/.git) to `dest` and commit it on `main`; reopen if done."""
        from git import Repo  # GitPython loads with a checkout, not with the graph (plumbing.py)

        if not (dest / ".git").exists():
            shutil.copytree(
                src, dest, ignore=shutil.ignore_patterns("__pycache__", ".git"), dirs_exist_ok=True
            )
            Repo.init(dest, initial_branch="main").close()
        ws = cls(dest)
        if not ws._ok("rev-parse", "--verify", "-q", "HEAD"):
            ws._git("add", "--all")
            ws._git(
                "commit",
                "-q",
                "--no-verify",
                "--no-gpg-sign",
                "-m",
                f"perfloop: import {src.name}",
                env=IDENTITY_ENV,
            )
        return ws

    def has_commit(self) -> bool:
        """Whether HEAD names a commit (a fresh `git init` has none)."""
        return self._ok("rev-parse", "--verify", "-q", "HEAD")

    def file_sha256(self, relpath: str) -> str:
        """sha256 of a working-tree file's bytes."""
        return sha256_hex(self._path(relpath).read_bytes())

    def read_file(self, relpath: str) -> str:
        """A working-tree file's text, UTF-8, line endings untouched."""
        return self._path(relpath).read_bytes().decode("utf-8")

    def write_file(self, relpath: str, data: bytes) -> None:
        """Overwrite a working-tree file's bytes (to put back exactly what was there)."""
        self._path(relpath).write_bytes(data)

    def changed_files(self, diff: str, *, allow_binary: bool = False) -> list[str]:
        """Paths a diff touches (both names of a rename), as git parses it; refuses unsafe paths and,
        unless allowed, binary hunks."""
        return self.patch_info(diff, allow_binary=allow_binary)[0]

    def patch_info(self, diff: str, *, allow_binary: bool = False) -> tuple[list[str], str]:
        """git's reading of a diff: the paths it touches (checked) and its `--summary` (modes)."""
        if not diff.strip():
            raise PatchError("the patch is empty; provide a unified diff")
        with self._scratch(diff) as (patch, _env):
            fields = iter(
                self._git(*APPLY, "--numstat", "-z", patch, strip_newline_in_stdout=False).split("\0")
            )
            summary = self._git(*APPLY, "--summary", patch)
        paths = []
        for field in filter(None, fields):
            added, _deleted, path = field.split("\t", 2)
            if added == "-" and not allow_binary:
                raise PatchError(
                    f"refusing binary patch for {path or 'a renamed file'}; send text diffs only"
                )
            paths += [path] if path else [next(fields), next(fields)]
        if not paths:
            raise PatchError("the patch changes no file; provide a unified diff")
        return [check_relpath(p) for p in dict.fromkeys(paths)], summary

    def index_modes(self, paths: list[str]) -> list[tuple[str, str]]:
        """(mode, path) of each of `paths` that the index holds."""
        if not paths:
            return []
        out = self._git("ls-files", "-s", "-z", "--", *paths, strip_newline_in_stdout=False)
        return [(e.split(" ", 1)[0], e.split("\t", 1)[1]) for e in out.split("\0") if "\t" in e]

    def snapshot(self) -> WorkspaceSnapshot:
        """HEAD, branch, every dirty path's content hash and the hashes of the staged/unstaged diffs."""
        status = self._git(
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            strip_newline_in_stdout=False,
        )
        dirty = {}
        for relpath in sorted({entry[3:] for entry in status.split("\0") if entry}):
            path = self.root / relpath
            dirty[relpath] = sha256_hex(path.read_bytes()) if path.is_file() else None
        diff = ("diff", "--binary", "--no-color", "--no-ext-diff")
        opts: dict[str, Any] = {"strip_newline_in_stdout": False, "stdout_as_string": False}
        return WorkspaceSnapshot(
            path=str(self.root),
            head_sha=self._git("rev-parse", "HEAD"),
            head_tree_sha=self._git("rev-parse", "HEAD^{tree}"),
            branch=self._branch(),
            dirty_sha256=dirty,
            staged_diff_sha256=sha256_hex(self._git(*diff, "--cached", **opts)),
            unstaged_diff_sha256=sha256_hex(self._git(*diff, **opts)),
        )

    def ensure_branch(self, name: str, start_point: str | None = None) -> None:
        """Be on branch `name`: create it (at HEAD or `start_point`), or switch to it.

        `git switch` carries the index and working tree along and refuses, rather than overwrite,
        when an uncommitted change conflicts with the switch.
        """
        self._git("check-ref-format", "--branch", name)
        if self._branch() == name:
            return
        exists = self._ok("rev-parse", "--verify", "-q", f"refs/heads/{name}")
        hint = (
            f"cannot switch to branch {name} without losing uncommitted changes;"
            " commit or move them yourself, then retry"
        )
        create = () if exists else ("-c", name, *((start_point,) if start_point else ()))
        self._git("switch", "-q", *(create or (name,)), hint=hint)

    def leave_branch(self, name: str, back_to: str | None, head_sha: str) -> bool:
        """Switch back to `back_to` (or HEAD detached at `head_sha`) and delete branch `name`, if
        `name` still points at `head_sha` (no commit of ours on it); True if it was deleted.
        Idempotent; the working tree and index are carried along as by `ensure_branch`."""
        ref = f"refs/heads/{name}"
        if not self._ok("rev-parse", "--verify", "-q", ref) or self._git("rev-parse", ref) != head_sha:
            return False
        if self._branch() == name:
            target = (back_to,) if back_to else ("--detach", head_sha)
            self._git("switch", "-q", *target, hint=f"cannot switch back to {back_to or head_sha}")
        self._git("branch", "-q", "-D", name)
        return True

    def give_back(self, name: str, back_to: str | None, head_sha: str) -> bool:
        """Switch from branch `name` back to `back_to` (or HEAD detached at `head_sha`), even when
        `name` holds commits (then kept); delete `name` when it holds none (True then). The working
        tree and index are carried along as by `ensure_branch`."""
        if self._branch() == name:
            target = (back_to,) if back_to else ("--detach", head_sha)
            self._git("switch", "-q", *target, hint=f"cannot switch back to {back_to or head_sha}")
        return self.leave_branch(name, back_to, head_sha)

    def abandon_branch(self, name: str) -> None:
        """If HEAD is on `name` (left there by a killed attempt), switch back to what was checked
        out before it (`@{-1}`: a branch, or a detached commit) and delete `name` with its commits;
        uncommitted work is carried along as by `ensure_branch`."""
        if self._branch() != name:
            return
        hint = f"cannot tell what was checked out before {name}; switch the checkout back yourself"
        ref = self._git("rev-parse", "--symbolic-full-name", "@{-1}", hint=hint)
        back = (
            ("--detach", self._git("rev-parse", "@{-1}")) if not ref else (ref.removeprefix("refs/heads/"),)
        )
        if back == (name,):
            raise PatchError(hint)
        self._git("switch", "-q", *back, hint=f"cannot switch back from {name} to {back[-1]}")
        self._git("branch", "-q", "-D", name)

    def check_patch(self, diff: str, *, allow_binary: bool = False, worktree: bool = True) -> None:
        """Raise PatchError unless `diff` applies to the working tree (unless not `worktree`), the
        index and HEAD's tree."""
        self.changed_files(diff, allow_binary=allow_binary)
        with self._scratch(diff) as (patch, env):
            if worktree:
                self._git(*APPLY, "--check", patch)
            self._git(*APPLY, "--check", "--cached", patch)
            self._git("read-tree", "HEAD", env=env)
            self._git(*APPLY, "--check", "--cached", patch, env=env)

    def worktree_has(self, diff: str, *, min_context: int | None = None) -> bool:
        """Whether the working tree holds `diff`'s result (the patch reverses cleanly).

        `min_context` is git apply's -C: how many context lines around each hunk must match.
        """
        self.changed_files(diff)
        with self._scratch(diff) as (patch, _env):
            return self._ok(*APPLY, *apply_context(min_context), "--check", "-R", patch)

    def apply_to_worktree(self, diff: str, *, reverse: bool = False, min_context: int | None = None) -> None:
        """Apply (or reverse) `diff` on the working tree only; all hunks or none."""
        self.changed_files(diff)
        with self._scratch(diff) as (patch, _env):
            self._git(*APPLY, *apply_context(min_context), *(("-R",) if reverse else ()), patch)

    def apply_and_commit(
        self, diff: str, subject: str, trailers: dict[str, str], *, allow_binary: bool = False
    ) -> CommitInfo:
        """Commit `diff` alone on the session branch, then apply it to index and working tree.

        Idempotent: a commit in HEAD's history with the same trailers is returned, after making
        sure index and working tree hold its patch. All or nothing: checks come first, and a
        failing later step undoes the earlier ones.
        """
        branch = self._session_branch()
        message = commit_message(subject, trailers)
        found = self.find_commit(trailers)
        if found:
            with self._scratch(self._commit_patch(found)) as (patch, _env):
                self._apply_pair(patch, reverse=False, targets=self._targets(patch, present=True))
            return found
        self.check_patch(diff, allow_binary=allow_binary)
        head = self._git("rev-parse", "HEAD")
        with self._scratch(diff) as (patch, env):
            sha = self._commit_tree(patch, env, message, head, reverse=False)
            self._git("update-ref", "-m", "perfloop: apply", f"refs/heads/{branch}", sha, head)
            fault_point("git:ref-moved")
            try:
                self._apply_pair(patch, reverse=False, targets=[("--cached",), ()])
            except PatchError:
                self._git("update-ref", "-m", "perfloop: undo apply", f"refs/heads/{branch}", head, sha)
                raise
        return parse_log(self._git("log", "-1", LOG_FORMAT, sha), branch)[0]

    def find_commit(self, trailers: dict[str, str]) -> CommitInfo | None:
        """The newest commit in HEAD's whole history whose trailers include all of `trailers`.

        Commits undone by a later `Perfloop-Reverts: <sha>` commit, and the revert commits
        themselves, are skipped; a tip moved back by revert_commit is no longer in HEAD's history.
        """
        check_trailers(trailers)
        greps = [f"--grep={k}: {v}" for k, v in trailers.items()]
        log = self._git("log", "-F", "--all-match", *greps, LOG_FORMAT, "HEAD")
        commits = parse_log(log, self._branch() or "HEAD")
        reverted = {c.trailers[REVERTS_TRAILER] for c in commits if REVERTS_TRAILER in c.trailers}
        return next(
            (
                c
                for c in commits
                if REVERTS_TRAILER not in c.trailers
                and c.sha not in reverted
                and trailers.items() <= c.trailers.items()
            ),
            None,
        )

    def revert_commit(self, commit: CommitInfo) -> None:
        """Undo one of our commits: move the branch back if it is the tip, else add a revert commit.

        The patch is also reversed in index and working tree, all or nothing, checked before any
        ref moves. Idempotent: a commit already undone (and its patch already gone) is left alone.
        """
        branch = self._session_branch()
        head = self._git("rev-parse", "HEAD")
        with self._scratch(self._commit_patch(commit)) as (patch, env):
            targets = self._targets(patch, present=False)
            new = None
            if head == commit.sha:
                new = commit.parent_sha
            elif self._ok("merge-base", "--is-ancestor", commit.sha, head) and not self._git(
                "log", "-F", f"--grep={REVERTS_TRAILER}: {commit.sha}", "--format=%H", head
            ):
                message = commit_message(
                    f'Revert "{commit.subject}"', {**commit.trailers, REVERTS_TRAILER: commit.sha}
                )
                new = self._commit_tree(patch, env, message, head, reverse=True)
            if new:
                self._git("update-ref", "-m", "perfloop: revert", f"refs/heads/{branch}", new, head)
                fault_point("git:revert-ref-moved")
            try:
                self._apply_pair(patch, reverse=True, targets=targets)
            except PatchError:
                if new:
                    self._git("update-ref", "-m", "perfloop: undo revert", f"refs/heads/{branch}", head, new)
                raise
