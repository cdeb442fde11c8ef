"""Applying a playbook's SGLang patch to a checkout, all hunks or none.

Which patch fits a release is chosen in playbooks/patches.py. A patch that does not fit reports
`playbook does not fit sglang X.Y.Z: hunk N failed at file:line` and leaves every byte of the repo
as it was (git apply checks before writing).
"""

from __future__ import annotations

import re

from state.engines.sglang import SglangLayout
from state.engines.workspace import PatchPolicy
from tools.errors import PatchError
from tools.workspace.git import GitWorkspace
from tools.workspace.patch_check import gate_workspace

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_FAILED = re.compile(r"patch does not apply: (\S+):(\d+)")


def hunk_number(diff: str, relpath: str, old_line: int) -> int | None:
    """1-based index, within `relpath`'s part of the diff, of the hunk starting at old line `old_line` (pure)."""
    parts = re.split(r"^diff --git ", diff, flags=re.M)
    part = next((p for p in parts if p.startswith(f"a/{relpath} ")), "")
    starts = [int(s) for s in _HUNK.findall(part)]
    return starts.index(old_line) + 1 if old_line in starts else None


def does_not_fit(version: str, diff: str, err: PatchError) -> PatchError:
    """The one-line 'playbook does not fit sglang X.Y.Z: hunk N failed at file:line' error (pure)."""
    failed = _FAILED.search(str(err))
    if not failed:
        return PatchError(f"playbook does not fit sglang {version}: {err}")
    relpath, line = failed[1], int(failed[2])
    number = hunk_number(diff, relpath, line)
    return PatchError(
        f"playbook does not fit sglang {version}: hunk {number or '?'} failed at {relpath}:{line}"
    )


def apply_sglang_patch(ws: GitWorkspace, layout: SglangLayout, diff: str, *, check_only: bool) -> list[str]:
    """Check the diff against worktree, index and HEAD, then (unless check_only) apply it to the worktree.

    Returns the files it touches (or would touch). All hunks or none: a misfit raises the
    'does not fit' PatchError and nothing is written.
    """
    try:
        files = gate_workspace(ws, diff, PatchPolicy())
    except PatchError as err:
        if str(err).startswith("patch refused"):  # unsafe or malformed, whatever the release
            raise
        raise does_not_fit(layout.version, diff, err) from err
    if not check_only:
        ws.apply_to_worktree(diff)
    return files
