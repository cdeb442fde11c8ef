"""The patch gate: the one check every patch passes before perfloop applies it, whatever its source
(a playbook's diff, a human's edited patch, a model-written one).

`scan_patch` is pure: the size cap, no hidden character in what the patch adds or in a hunk's
`\\ ` marker lines (a control character
other than tab and newline, a CR other than a CRLF line ending, a bidi control or another invisible
format character: tools/workspace/hidden.py; a reviewer would read another line than the one committed), the
diff's structure (file headers, hunks whose line counts add
up), every path named (relative, no `..`, nothing under `.git/`), every file mode (regular files
only: 100644 or 100755, so no symlink, submodule or other mode change beyond the executable bit) and
binary hunks (only when the policy allows them). `gate_patch` adds what needs the repository: git's
own reading of the diff (`git apply --numstat --summary`: the paths and modes it would apply), no
path through a symlink or resolving outside the working tree, and `git apply --check` against the
working tree, the index and HEAD. Every refusal is one `PatchError` line with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from state.engines.workspace import PatchPolicy
from tools.errors import PatchError
from tools.workspace.commands import check_relpath
from tools.workspace.git import GitWorkspace
from tools.workspace.hidden import describe, first_hidden, look_alike

REGULAR_MODES = ("100644", "100755")
_DIFF_STARTS = ("diff ", "--- ", "+++ ", "@@", "GIT binary patch", "Binary files ", "new file mode", "index ")
_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DIFF_GIT = re.compile(r"diff --git (\S+) (\S+)$")
_MODE_LINE = re.compile(r"(new file mode|deleted file mode|old mode|new mode) (\d+)$")
_INDEX_MODE = re.compile(r"index [0-9a-f]+\.\.[0-9a-f]+ (\d+)$")
_NAME_LINE = re.compile(r"(rename from|rename to|copy from|copy to) (.+)$")
_HEADER_WORDS: tuple[str, ...] = ("similarity index", "dissimilarity index", "index ", "new file mode")
_HEADER_WORDS += (
    "deleted file mode",
    "old mode",
    "new mode",
    "rename from",
    "rename to",
    "copy from",
    "copy to",
)


def refuse(reason: str) -> PatchError:
    """The one error of the gate."""
    return PatchError(f"patch refused: {reason}")


def _path(raw: str, where: str) -> str:
    """A header's path without its a/ b/ prefix, checked (absolute, `..`, `.git/`)."""
    path = raw.split("\t")[0].strip()
    if path.startswith('"'):
        raise refuse(f"{where} names a quoted path {path}; use plain ASCII file names")
    if path.startswith("/"):
        raise refuse(f"{where} names the absolute path {path}; paths must be relative to the repository")
    path = path[2:] if path[:2] in ("a/", "b/") else path
    try:
        return check_relpath(path)
    except PatchError as exc:
        raise refuse(str(exc).removeprefix("refusing ")) from None


def _mode(mode: str, where: str) -> None:
    if mode not in REGULAR_MODES:
        kind = {"120000": "a symlink", "160000": "a submodule", "040000": "a directory"}.get(
            mode, "mode " + mode
        )
        raise refuse(f"{where} makes {kind}; only regular files (100644 or 100755) may be patched")


def _hidden(line: str, where: str, first: bool = False) -> None:
    """Refuse a line of the patch that holds a character the reviewer does not see (a byte-order
    mark opening a file's `first` line aside)."""
    skip = 2 if first and line.startswith("+\ufeff") else 0
    at = first_hidden(line[skip:])
    if at is not None:
        raise refuse(
            f"{where} holds {describe(line[skip + at])}, which a reviewer does not see as it is "
            "(a control, bidi or invisible format character); write it as an escape (\\x1b) instead"
        )
    if line.startswith("+") and (alike := look_alike(line[1:])) is not None:
        raise refuse(f"{where}: {alike}, which a reviewer takes for another word; write it in one script")


def scan_patch(diff: str, policy: PatchPolicy) -> list[str]:
    """Check a diff's text against the gate's rules (pure); the paths it names, in order."""
    size = len(diff.encode("utf-8", "surrogatepass"))
    if size > policy.max_bytes:
        raise refuse(
            f"{size} bytes is over the limit of {policy.max_bytes} (`max_patch_bytes` in the target)"
        )
    if "\0" in diff:
        raise refuse("it holds NUL bytes; send a text unified diff")
    paths: list[str] = []
    old = new = 0  # lines left in the current hunk
    sections = 0
    file, at = "", 0  # the file the hunk changes (`+++` path) and its next line number there
    lines = diff.split("\n")  # git's line breaks: \n only
    if lines and lines[-1] == "":
        lines.pop()
    signed = False  # past a `git format-patch` signature line (`-- `)
    for n, line in enumerate(lines, 1):
        where = f"line {n}"
        if signed:  # every line is read: `git apply` applies a diff that follows a signature
            _hidden(line, where)
            if line.startswith(_DIFF_STARTS):
                raise refuse(f"{where}: diff text after the `-- ` signature line; send one plain diff")
            continue
        if old > 0 or new > 0:
            tag = line[:1]
            if tag in (" ", ""):
                old, new = old - 1, new - 1
            elif tag == "-":
                old -= 1
            elif tag == "+":
                _hidden(line, f"{file} line {at} (patch line {n})", first=at == 1)
                new -= 1
            elif tag == "\\":  # `\ No newline at end of file`: git reads any text after it
                _hidden(line, f"{file} marker line (patch line {n})")
            else:
                raise refuse(
                    f"{where}: hunk ends early (expected {old} old and {new} new lines); not a unified diff"
                )
            at += tag in (" ", "", "+")
            if old < 0 or new < 0:
                raise refuse(f"{where}: hunk has more lines than its header says; not a unified diff")
            continue
        if line == "-- ":  # `git format-patch` signature: the diff is over
            signed = True
            continue
        _hidden(line, where)
        if m := _DIFF_GIT.match(line):
            sections += 1
            paths += [_path(m[1], where), _path(m[2], where)]
        elif line.startswith(("--- ", "+++ ")):
            sections += line.startswith("+++ ")
            name = line[4:]
            if name.split("\t")[0].strip() != "/dev/null":
                paths.append(_path(name, where))
                file = paths[-1] if line.startswith("+++ ") else file
        elif m := _HUNK.match(line):
            if not sections:
                raise refuse(f"{where}: hunk before any file header; not a unified diff")
            old = 1 if m[1] is None else int(m[1])
            new = 1 if m[3] is None else int(m[3])
            at = int(m[2])
        elif m := _MODE_LINE.match(line):
            _mode(m[2], where)
        elif m := _INDEX_MODE.match(line):
            _mode(m[1], where)
        elif m := _NAME_LINE.match(line):
            paths.append(_path(m[2], where))
        elif line.startswith(("GIT binary patch", "Binary files ")):
            if not policy.allow_binary:
                raise refuse(
                    f"{where}: binary hunk; send text diffs only (a playbook may declare binary patches)"
                )
        elif (
            sections
            and not line.startswith((*_HEADER_WORDS, "\\"))
            and line.strip()
            and not policy.allow_binary
        ):
            raise refuse(f"{where}: {line[:60]!r} is not part of a unified diff")
    if old > 0 or new > 0:
        raise refuse(f"the last hunk is cut short ({old} old and {new} new lines missing)")
    if not sections:
        raise refuse("no file header (`--- a/FILE` / `+++ b/FILE`); send a unified diff")
    return list(dict.fromkeys(paths))


def check_git_summary(summary: str) -> None:
    """Refuse modes git itself reads in the diff (`git apply --summary`): create/delete/mode change."""
    for line in summary.splitlines():
        for mode in re.findall(r"\b(\d{6})\b", line):
            _mode(mode, f"git reads `{line.strip()}`, which")


def check_worktree_paths(root: Path, paths: list[str]) -> None:
    """No path goes through a symlink or resolves outside the working tree `root`."""
    for rel in paths:
        target = root / rel
        for part in (target, *target.parents):
            if part == root or not part.is_relative_to(root):
                break
            if part.is_symlink():
                raise refuse(
                    f"{rel} goes through the symlink {part.relative_to(root)}; symlinks are not followed"
                )
        if not target.resolve().is_relative_to(root.resolve()):
            raise refuse(f"{rel} resolves outside the repository")


def gate_workspace(ws: GitWorkspace, diff: str, policy: PatchPolicy) -> list[str]:
    """The gate against an open checkout: the files `diff` changes, or PatchError. Changes nothing."""
    paths = scan_patch(diff, policy)
    files, summary = ws.patch_info(diff, allow_binary=policy.allow_binary)
    check_git_summary(summary)
    check_worktree_paths(ws.root, list(dict.fromkeys([*paths, *files])))
    for mode, rel in ws.index_modes(files):
        _mode(mode, f"{rel} is in the index with mode {mode}, so the patch")
    ws.check_patch(diff, allow_binary=policy.allow_binary)
    return files


def gate_patch(repo: Path, diff: str, policy: PatchPolicy | None = None) -> list[str]:
    """The patch gate, which every source of patches calls: the files `diff` changes in the checkout
    `repo`, or PatchError with the reason. Changes nothing."""
    with GitWorkspace(repo) as ws:
        return gate_workspace(ws, diff, policy or PatchPolicy())
