"""Applying a playbook's SGLang patch to a checkout: the patch for its release, all hunks or none.

A playbook keys its SGLang patches in `[patches]` as `"sglang@X.Y.Z"` (this patch, from release
X.Y.Z on, until the next key) plus a plain `sglang` (the newest, what the loop uses). Patches are
written against the upstream layout (`python/sglang/...`) and rebased onto an installed tree.
A patch that does not fit reports `playbook does not fit sglang X.Y.Z: hunk N failed at file:line`
and leaves every byte of the repo as it was (git apply checks before writing).
"""

from __future__ import annotations

import re
from pathlib import Path

from state.sglang import SglangLayout
from state.workspace import PatchPolicy
from tools.errors import ConfigError, PatchError
from tools.sglang.layout import parse_version
from tools.workspace.gate import gate_workspace
from tools.workspace.git import GitWorkspace

UPSTREAM_PACKAGE_DIR = "python/sglang"
"""Package folder the catalog's SGLang patches are written against."""

_KEY = re.compile(r"^sglang@(\d+)\.(\d+)\.(\d+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_FAILED = re.compile(r"patch does not apply: (\S+):(\d+)")


def choose_patch_key(patches: dict[str, str], version: tuple[int, int, int]) -> str:
    """The `sglang@X.Y.Z` key with the greatest X.Y.Z not above `version` (pure)."""
    keyed = sorted((tuple(map(int, m.groups())), key) for key in patches if (m := _KEY.match(key)))
    fitting = [key for since, key in keyed if since <= version]
    if not fitting:
        oldest = keyed[0][1].split("@")[1] if keyed else None
        raise ConfigError(
            f"no sglang patch for {'.'.join(map(str, version))}"
            + (f" (the oldest starts at {oldest})" if oldest else " (no sglang@X.Y.Z keys)")
        )
    return fitting[-1]


def rebase_diff(diff: str, package_dir: str) -> str:
    """The diff with `python/sglang/` paths moved to `package_dir/` (pure; identity for a checkout)."""
    if package_dir == UPSTREAM_PACKAGE_DIR:
        return diff
    pattern = re.compile(
        rf"^(diff --git a/|--- a/|\+\+\+ b/)({re.escape(UPSTREAM_PACKAGE_DIR)}/)"
        rf"|( b/){re.escape(UPSTREAM_PACKAGE_DIR)}/",
        re.M,
    )
    return pattern.sub(lambda m: (m[1] or m[3]) + package_dir + "/", diff)


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


def sglang_patch(patches: dict[str, str], source_dir: Path, layout: SglangLayout) -> tuple[str, str]:
    """(key, diff) of a playbook's patch for this release, rebased onto the repo's layout.

    `patches` is the playbook's `[patches]` table, `source_dir` its folder.
    """
    key = choose_patch_key(patches, parse_version(layout.version))
    path = source_dir / patches[key]
    try:
        diff = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            f"patch {path} for {key} cannot be read ({err.strerror}); fix the playbook"
        ) from err
    return key, rebase_diff(diff, layout.package_dir)


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
