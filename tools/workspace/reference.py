"""The reference tree beside the candidate (interleaved arms): a linked git worktree of the
candidate commit's parent that carries the checkout's uncommitted state (e.g. the dormant profiler
hook), so the reference server runs exactly what the reference measurement ran.

The worktree lives in the session's folder, never in the user's checkout, and is removed (with
`git worktree remove --force` and `git worktree prune`) after each measurement; removing it twice
is a no-op.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from state.door.calls import Done
from state.engines.workspace import ReferenceCopyArgs, RemoveCopyArgs, WorkspaceSnapshot
from tools.door import tool
from tools.errors import PatchError
from tools.workspace.git import GitWorkspace


def _drop(ws: GitWorkspace, dest: Path) -> None:
    """Remove `dest` as a worktree of `ws` (or as a leftover folder) and forget stale entries."""
    listed = ws._git("worktree", "list", "--porcelain")
    if f"worktree {dest.resolve()}" in listed.splitlines():
        ws._git("worktree", "remove", "--force", str(dest))
    elif dest.exists():
        shutil.rmtree(dest)
    ws._git("worktree", "prune")


@tool("repo.reference_copy")
def reference_copy(args: ReferenceCopyArgs) -> WorkspaceSnapshot:
    """Check `commit` out at `dest` and carry over the checkout's uncommitted changes: files the
    commits since `commit` did not touch are copied; touched ones get their uncommitted diff applied
    (three-way, so an edit beside the patched lines carries over; one on them is refused)."""
    with GitWorkspace(args.repo) as ws:
        _drop(ws, args.dest)
        args.dest.parent.mkdir(parents=True, exist_ok=True)
        ws._git("worktree", "add", "--detach", "--force", str(args.dest), args.commit)
        touched = set(ws._git("diff", "--name-only", args.commit, "HEAD").splitlines())
        for relpath, sha in ws.snapshot().dirty_sha256.items():
            src, dst = ws.root / relpath, args.dest / relpath
            if relpath in touched:
                diff = ws._git("diff", "--binary", "HEAD", "--", relpath, strip_newline_in_stdout=False)
                done = subprocess.run(
                    ["git", "apply", "--3way", "--whitespace=nowarn", "-"],
                    cwd=args.dest,
                    input=diff.encode(),
                    capture_output=True,
                    check=False,
                )
                if done.returncode:
                    _drop(ws, args.dest)
                    why = "; ".join(
                        line for line in done.stderr.decode(errors="replace").splitlines() if line
                    )
                    raise PatchError(
                        f"the reference copy cannot carry the uncommitted change of {relpath} "
                        f"({why[:160]}); "
                        'set `[decide] arms = "sequential"` for this target'
                    )
            elif sha is None:
                dst.unlink(missing_ok=True)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
    with GitWorkspace(args.dest) as copy:
        return copy.snapshot()


@tool("repo.remove_reference_copy")
def remove_reference_copy(args: RemoveCopyArgs) -> Done:
    """Remove the reference copy and its worktree entry (a no-op when already gone)."""
    with GitWorkspace(args.repo) as ws:
        _drop(ws, args.dest)
    return Done()
