"""The patch gate on real repositories: every rule refuses with a reason and changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from state.door.calls import ApplyArgs
from state.engines.workspace import PatchPolicy
from tests.integration.test_git_workspace import PATCH, TRAILERS, binary_diff, make_diff, world
from tools.errors import PatchError
from tools.workspace import repo as repo_tools
from tools.workspace.git import GitWorkspace
from tools.workspace.patch_check import gate_patch, scan_patch

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "targets" / "mla_server"
PLAYBOOK_DIFF = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "patches" / "mla_server.diff"


def new_file(path: str, mode: str = "100644", body: str = "+x\n") -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode {mode}\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n{body}"
    )


MODE_CHANGE = "diff --git a/pkg/mod.py b/pkg/mod.py\nold mode 100644\nnew mode {mode}\n"
REFUSED = {
    "absolute +++": (PATCH.replace("+++ b/pkg/mod.py", "+++ /etc/passwd"), "absolute path"),
    "absolute diff --git": (new_file("x").replace("a/x b/x", "/etc/x /etc/x"), "absolute path"),
    "dot-dot": (new_file("../outside.py"), "'../outside.py'"),
    "dot-git": (make_diff(".git/config", 10, "line 10", "x"), ".git"),
    "dot-git-upper": (new_file("pkg/.GIT/hooks/post-checkout"), ".git"),
    "symlink created": (
        new_file("link", "120000", "+/etc/passwd\n\\ No newline at end of file\n"),
        "symlink",
    ),
    "mode to symlink": (MODE_CHANGE.format(mode="120000"), "symlink"),
    "submodule": (new_file("sub", "160000", "+Subproject commit " + "a" * 40 + "\n"), "submodule"),
    "binary": (
        "diff --git a/b.bin b/b.bin\nnew file mode 100644\nindex 0000000..e69de29\n"
        "Binary files /dev/null and b/b.bin differ\n",
        "binary",
    ),
    "not a diff": ("rm -rf /\n", "no file header"),
    "hunk too long": (PATCH.replace("@@ -7,7 +7,7 @@", "@@ -7,3 +7,3 @@"), "unified diff"),
    "hunk cut short": (PATCH.replace("@@ -7,7 +7,7 @@", "@@ -7,9 +7,9 @@"), "cut short"),
    "stray text": (PATCH + "echo pwned\n", "not part of a unified diff"),
    "empty": ("", "no file header"),
    "does not apply": (make_diff("pkg/mod.py", 10, "line 99", "x"), "does not apply"),
    "nul byte": (PATCH.replace("patched", "pa\0tched"), "NUL"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_gate_refuses_with_the_reason_and_changes_nothing(tmp_path: Path, case: str) -> None:
    ws = _ws(tmp_path)
    diff, reason = REFUSED[case]
    before = world(ws)
    with pytest.raises(PatchError, match="refus|does not apply") as err:
        gate_patch(ws.root, diff)
    assert reason in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(PatchError):
        repo_tools.apply_patch(ApplyArgs(repo=ws.root, diff=diff, subject="s", trailers=TRAILERS))
    assert world(ws) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo", "src"]


def _ws(tmp_path: Path) -> GitWorkspace:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    ws = GitWorkspace.create_from_tree(src, tmp_path / "repo")
    ws.ensure_branch("perfloop/s1")
    return ws


def test_symlinks_in_the_repo_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = _ws(tmp_path)
    os.symlink(outside, ws.root / "out")
    os.symlink("pkg/mod.py", ws.root / "inner")
    ws._git("add", "out", "inner")
    ws._git(
        "commit",
        "-qm",
        "links",
        env={
            "GIT_AUTHOR_NAME": "u",
            "GIT_AUTHOR_EMAIL": "u@x",
            "GIT_COMMITTER_NAME": "u",
            "GIT_COMMITTER_EMAIL": "u@x",
        },
    )
    for diff, reason in [
        (new_file("out/x.py"), "symlink out"),
        (
            "diff --git a/inner b/inner\nindex 1111111..2222222 120000\n--- a/inner\n+++ b/inner\n"
            "@@ -1 +1 @@\n-pkg/mod.py\n\\ No newline at end of file\n+/etc/passwd\n\\ No newline at end of file\n",
            "symlink",
        ),
        (make_diff("inner", 10, "line 10", "x"), "symlink"),
    ]:
        with pytest.raises(PatchError, match=reason):
            gate_patch(ws.root, diff)
    assert list(outside.iterdir()) == []
    ws.close()


def test_the_size_cap_is_configurable_and_checked_first(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    huge = PATCH + "\n" * (50 * 1024 * 1024)
    with pytest.raises(PatchError, match="over the limit of 1048576"):
        gate_patch(ws.root, huge)
    with pytest.raises(PatchError, match="over the limit of 100 "):
        gate_patch(ws.root, PATCH, PatchPolicy(max_bytes=100))
    assert gate_patch(ws.root, PATCH, PatchPolicy(max_bytes=len(PATCH))) == ["pkg/mod.py"]
    ws.close()


def test_the_executable_bit_and_declared_binary_hunks_pass(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    assert gate_patch(ws.root, MODE_CHANGE.format(mode="100755")) == ["pkg/mod.py"]
    binary = binary_diff(tmp_path)
    with pytest.raises(PatchError, match="binary"):
        gate_patch(ws.root, binary)
    files = gate_patch(ws.root, binary, PatchPolicy(allow_binary=True))
    commit = repo_tools.apply_patch(
        ApplyArgs(
            repo=ws.root, diff=binary, subject="s", trailers=TRAILERS, policy=PatchPolicy(allow_binary=True)
        )
    )
    assert files and commit.sha
    ws.close()


def test_the_shipped_playbook_patch_passes_the_gate(tmp_path: Path) -> None:
    with GitWorkspace.create_from_tree(DEMO, tmp_path / "demo") as ws:
        diff = PLAYBOOK_DIFF.read_text()
        assert scan_patch(diff, PatchPolicy())
        assert gate_patch(ws.root, diff) == ["mla_server/attention/mla_backend.py"]


def test_leave_branch_gives_the_repo_back_and_keeps_a_branch_with_commits(tmp_path: Path) -> None:
    ws = _ws(tmp_path)  # on perfloop/s1, created from main
    head = ws._git("rev-parse", "HEAD")
    (ws.root / "pkg" / "mod.py").write_text("user edit\n")
    assert ws.leave_branch("perfloop/s1", "main", head) is True
    assert ws._branch() == "main" and not ws._ok("rev-parse", "--verify", "-q", "refs/heads/perfloop/s1")
    assert (ws.root / "pkg" / "mod.py").read_text() == "user edit\n"
    assert ws.leave_branch("perfloop/s1", "main", head) is False  # idempotent
    ws.ensure_branch("perfloop/s2")
    (ws.root / "pkg" / "mod.py").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    ws.apply_and_commit(PATCH, "p", {"Perfloop-Session": "s2"})
    assert ws.leave_branch("perfloop/s2", "main", head) is False and ws._branch() == "perfloop/s2"
    ws.close()


def test_crlf_endings_pass_and_a_form_feed_only_where_the_file_had_it(tmp_path: Path) -> None:
    """CRLF line endings are content; a form feed (a control character) may stay in context and
    removed lines, but no patch adds one (tests/integration/test_hostile_patch.py: every class)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.txt").write_bytes(b"a\r\nb\x0cc\r\nd\r\n")
    with GitWorkspace.create_from_tree(src, tmp_path / "repo") as ws:
        diff = "diff --git a/w.txt b/w.txt\n--- a/w.txt\n+++ b/w.txt\n@@ -1,3 +1,3 @@\n a\r\n-b\x0cc\r\n+Bc\r\n d\r\n"
        assert gate_patch(ws.root, diff) == ["w.txt"]
        with pytest.raises(PatchError, match="w.txt line 2 .*U\\+000C"):
            gate_patch(ws.root, diff.replace("+Bc", "+B\x0cc"))
