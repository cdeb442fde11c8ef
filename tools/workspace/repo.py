"""Door tools over the target's git checkout: workspace, session branch, patches, instrumentation."""

from __future__ import annotations

from state.door.calls import (
    ApplyArgs,
    BranchArgs,
    CommitArgs,
    CopyTreeArgs,
    Done,
    InstrumentArgs,
    LeaveBranchArgs,
    RemoveInstrumentationArgs,
    RepoArgs,
    SglangSite,
)
from state.engines.sglang import HookSite
from state.engines.vllm import EngineSite, EngineSiteArgs, VllmSiteArgs
from state.engines.workspace import CommitInfo, InstrumentationRecord, WorkspaceSnapshot
from tools.door import tool
from tools.engines.registry import engine
from tools.sglang import layout as sglang_layout
from tools.vllm import hook as vllm_hook
from tools.workspace import instrumentation
from tools.workspace.commands import sha256_hex
from tools.workspace.git import GitWorkspace
from tools.workspace.patch_check import gate_workspace


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


@tool("repo.leave_branch")
def leave_branch(args: LeaveBranchArgs) -> WorkspaceSnapshot:
    """Switch back to the branch the session started on and delete its branch if it holds no commit."""
    with GitWorkspace(args.repo) as ws:
        ws.leave_branch(args.name, args.back_to, args.head_sha)
        return ws.snapshot()


@tool("repo.give_back")
def give_back(args: LeaveBranchArgs) -> WorkspaceSnapshot:
    """Back to the branch the session started on, its branch kept only if it holds commits."""
    with GitWorkspace(args.repo) as ws:
        ws.give_back(args.name, args.back_to, args.head_sha)
        return ws.snapshot()


@tool("repo.abandon_branch")
def abandon_branch(args: BranchArgs) -> WorkspaceSnapshot:
    """Give up branch `name` if a killed attempt left the checkout on it: back to what was checked
    out before it, the branch and its commits deleted (the snapshot after)."""
    with GitWorkspace(args.repo) as ws:
        ws.abandon_branch(args.name)
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
    """Pass the patch gate, apply the patch fully or not at all, and commit only it on the current branch.

    A commit of an earlier attempt (found by its trailers) is completed without the gate: it passed
    it then."""
    with GitWorkspace(args.repo) as ws:
        if ws.find_commit(args.trailers) is None:
            gate_workspace(ws, args.diff, args.policy)
        return ws.apply_and_commit(
            args.diff, args.subject, args.trailers, allow_binary=args.policy.allow_binary
        )


@tool("repo.sglang_site")
def sglang_site(args: RepoArgs) -> SglangSite:
    """Locate the SGLang package in the repo, its release, and the decode method to instrument."""
    layout = sglang_layout.locate(args.repo)
    return SglangSite(layout=layout, hook=sglang_layout.hook_site(args.repo, layout))


@tool("repo.vllm_site")
def vllm_site(args: VllmSiteArgs) -> HookSite:
    """The V1 model runner's per-step method in the vLLM checkout, where the profiler hook goes."""
    return vllm_hook.hook_site(args.repo, args.env)


@tool("repo.engine_site")
def engine_site(args: EngineSiteArgs) -> EngineSite:
    """Where an engine registered from outside puts the dormant profiler (`Engine.hook_site`)."""
    return EngineSite(hook=engine(args.kind).hook_site(args.repo, args.env))


@tool("repo.check_patch")
def check_patch(args: ApplyArgs) -> Done:
    """The patch gate (tools/workspace/patch_check.py) on a patch: it is safe and applies; changes nothing."""
    with GitWorkspace(args.repo) as ws:
        files = gate_workspace(ws, args.diff, args.policy)
    return Done(note=f"applies: {', '.join(files)}")


@tool("repo.revert_commit")
def revert_commit(args: CommitArgs) -> WorkspaceSnapshot:
    """Undo a commit of ours that was not accepted (worktree, index and branch)."""
    with GitWorkspace(args.repo) as ws:
        ws.revert_commit(args.commit)
        return ws.snapshot()
