"""Door tools over the target's git checkout: workspace, session branch, patches, instrumentation."""

from __future__ import annotations

from state.calls import (
    ApplyArgs,
    BranchArgs,
    CommitArgs,
    CopyTreeArgs,
    Done,
    InstrumentArgs,
    RemoveInstrumentationArgs,
    RepoArgs,
    SglangSite,
)
from state.workspace import CommitInfo, InstrumentationRecord, WorkspaceSnapshot
from tools.door import tool
from tools.sglang import layout as sglang_layout
from tools.workspace import instrumentation
from tools.workspace.commands import sha256_hex
from tools.workspace.git import GitWorkspace


def tree_fingerprint(snap: WorkspaceSnapshot) -> str:
    """One hash for HEAD plus every uncommitted change: what a server launched from it runs (pure)."""
    parts = [snap.head_sha, snap.staged_diff_sha256, snap.unstaged_diff_sha256]
    parts += [f"{k}={v}" for k, v in sorted(snap.dirty_sha256.items())]
    return sha256_hex("\n".join(parts).encode())


@tool("repo.create_from_tree")
def create_from_tree(args: CopyTreeArgs) -> WorkspaceSnapshot:
    """Copy a source tree into a new git repository (idempotent)."""
    with GitWorkspace.create_from_tree(args.src, args.dest) as ws:
        return ws.snapshot()


@tool("repo.snapshot")
def snapshot(args: RepoArgs) -> WorkspaceSnapshot:
    """HEAD, branch and the hash of every uncommitted change."""
    with GitWorkspace(args.repo) as ws:
        return ws.snapshot()


@tool("repo.ensure_branch")
def ensure_branch(args: BranchArgs) -> WorkspaceSnapshot:
    """Create or switch to the session branch, keeping the user's uncommitted work."""
    with GitWorkspace(args.repo) as ws:
        ws.ensure_branch(args.name, args.start_point)
        return ws.snapshot()


@tool("repo.instrument")
def instrument(args: InstrumentArgs) -> InstrumentationRecord:
    """Insert the dormant profiler instrumentation (idempotent)."""
    with GitWorkspace(args.repo) as ws:
        return instrumentation.instrument(ws, args.relpath, args.class_name, args.method)


@tool("repo.remove_instrumentation")
def remove_instrumentation(args: RemoveInstrumentationArgs) -> Done:
    """Reverse exactly the instrumentation hunks and verify the file's hash (idempotent)."""
    with GitWorkspace(args.repo) as ws:
        instrumentation.remove_instrumentation(ws, args.record)
    return Done(note=f"removed instrumentation from {args.record.relpath}")


@tool("repo.apply_patch")
def apply_patch(args: ApplyArgs) -> CommitInfo:
    """Apply a patch fully or not at all, and commit only it on the current branch."""
    with GitWorkspace(args.repo) as ws:
        return ws.apply_and_commit(args.diff, args.subject, args.trailers)


@tool("repo.sglang_site")
def sglang_site(args: RepoArgs) -> SglangSite:
    """Locate the SGLang package in the repo, its release, and the decode method to instrument."""
    layout = sglang_layout.locate(args.repo)
    return SglangSite(layout=layout, hook=sglang_layout.hook_site(args.repo, layout))


@tool("repo.check_patch")
def check_patch(args: ApplyArgs) -> Done:
    """Validate a patch (paths inside the repo, no .git/, no binary) and that it applies; change nothing."""
    with GitWorkspace(args.repo) as ws:
        ws.check_patch(args.diff)
    return Done(note=f"applies: {', '.join(ws.changed_files(args.diff))}")


@tool("repo.revert_commit")
def revert_commit(args: CommitArgs) -> WorkspaceSnapshot:
    """Undo a commit of ours that was not accepted (worktree, index and branch)."""
    with GitWorkspace(args.repo) as ws:
        ws.revert_commit(args.commit)
        return ws.snapshot()
