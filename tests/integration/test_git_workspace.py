"""GitWorkspace on real temporary repositories: patches become clean commits, user work survives."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tools.errors import PatchError
from tools.workspace import git as git_workspace
from tools.workspace.git import GitWorkspace

ORIGINAL = "".join(f"line {i}\n" for i in range(1, 21))
TRAILERS = {"Perfloop-Session": "s1", "Perfloop-Playbook": "fp8-gather", "Perfloop-Iteration": "1"}


def edit(text: str, old: str, new: str) -> str:
    """Replace exactly one occurrence."""
    assert text.count(old) == 1
    return text.replace(old, new)


def make_diff(relpath: str, lineno: int, old: str, new: str) -> str:
    """A one-line replacement diff with 3 lines of context, against ORIGINAL's numbering."""
    before = [f"line {i}" for i in range(lineno - 3, lineno)]
    after = [f"line {i}" for i in range(lineno + 1, lineno + 4)]
    body = [f" {line}" for line in before] + [f"-{old}", f"+{new}"] + [f" {line}" for line in after]
    return (
        f"diff --git a/{relpath} b/{relpath}\n--- a/{relpath}\n+++ b/{relpath}\n@@ -{lineno - 3},7 +{lineno - 3},7 @@\n"
        + "\n".join(body)
        + "\n"
    )


PATCH = make_diff("pkg/mod.py", 10, "line 10", "line 10 patched")


@pytest.fixture
def ws(tmp_path):
    """A workspace on branch perfloop/s1 with pkg/mod.py = ORIGINAL."""
    src = tmp_path / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text(ORIGINAL)
    (src / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0junk")
    (src / "README.md").write_text("demo\n")
    with GitWorkspace.create_from_tree(src, tmp_path / "repo") as workspace:
        workspace.ensure_branch("perfloop/s1")
        yield workspace


def user_changes(ws: GitWorkspace) -> None:
    """Stage an edit of line 2, leave an edit of line 18 unstaged, add an untracked file."""
    mod = ws.root / "pkg" / "mod.py"
    mod.write_text(edit(ORIGINAL, "line 2\n", "line 2 staged\n"))
    ws.repo.git.add("pkg/mod.py")
    mod.write_text(edit(mod.read_text(), "line 18\n", "line 18 unstaged\n"))
    (ws.root / "notes.txt").write_text("mine\n")


def world(ws: GitWorkspace) -> tuple:
    """Everything a failed operation must leave unchanged."""
    files = {
        p.relative_to(ws.root).as_posix(): p.read_bytes()
        for p in ws.root.rglob("*")
        if p.is_file() and ".git" not in p.parts
    }
    return (
        ws.snapshot(),
        files,
        ws.repo.git.execute(["git", "for-each-ref"]),
        ws.repo.git.execute(["git", "ls-files", "-s"]),
    )


def test_create_from_tree_commits_everything_but_caches_and_is_idempotent(ws, tmp_path):
    assert ws.repo.git.execute(["git", "ls-files"]).split() == ["README.md", "pkg/mod.py"]
    assert ws.repo.git.execute(["git", "log", "--format=%an <%ae>"]) == "perfloop <perfloop@localhost>"
    head = ws.snapshot().head_sha
    with GitWorkspace.create_from_tree(tmp_path / "src", tmp_path / "repo") as again:
        assert again.snapshot().head_sha == head


def test_apply_and_commit_keeps_user_staged_and_unstaged_changes_in_same_file(ws):
    user_changes(ws)
    old_head = ws.snapshot().head_sha
    commit = ws.apply_and_commit(PATCH, "Gather then cast", TRAILERS)
    git = ws.repo.git
    assert (commit.branch, commit.subject, commit.trailers, commit.parent_sha) == (
        "perfloop/s1",
        "Gather then cast",
        TRAILERS,
        old_head,
    )
    assert git.rev_parse("refs/heads/perfloop/s1") == commit.sha
    patched = edit(ORIGINAL, "line 10\n", "line 10 patched\n")
    assert git.execute(["git", "show", "HEAD:pkg/mod.py"], strip_newline_in_stdout=False) == patched
    assert git.execute(["git", "show", "--format=", "--name-only", "HEAD"]) == "pkg/mod.py"
    staged = edit(patched, "line 2\n", "line 2 staged\n")
    assert git.execute(["git", "show", ":pkg/mod.py"], strip_newline_in_stdout=False) == staged
    assert (ws.root / "pkg/mod.py").read_text() == edit(staged, "line 18\n", "line 18 unstaged\n")
    assert git.status("--porcelain") == "MM pkg/mod.py\n?? notes.txt"
    assert "Perfloop-Session: s1" in git.log("-1", "--format=%B")


@pytest.mark.parametrize(
    "diff",
    [
        make_diff("pkg/mod.py", 10, "line 10 (not there)", "x"),
        make_diff("pkg/mod.py", 17, "line 17", "line 17 patched"),  # context hits the user's unstaged line 18
        make_diff("pkg/mod.py", 4, "line 4", "line 4 patched"),  # context hits the user's staged line 2
    ],
    ids=["stale", "conflicts-with-worktree", "conflicts-with-index"],
)
def test_patch_that_does_not_apply_changes_nothing(ws, diff):
    user_changes(ws)
    before = world(ws)
    with pytest.raises(PatchError, match=r"patch does not apply: pkg/mod.py:\d+") as err:
        ws.apply_and_commit(diff, "broken", TRAILERS)
    assert "\n" not in str(err.value)
    assert world(ws) == before


def binary_diff(tmp_path: Path) -> str:
    """A real `git diff --binary` adding a file with NUL bytes, made in a scratch repository."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    run = lambda *args: (
        subprocess.run(["git", *args], cwd=scratch, check=True, capture_output=True, text=True).stdout
    )
    run("init", "-q")
    (scratch / "blob.bin").write_bytes(bytes(range(256)))
    run("add", "blob.bin")
    return run("diff", "--cached", "--binary")


@pytest.mark.parametrize(
    "diff",
    [
        make_diff(".git/config", 10, "line 10", "x"),
        "diff --git a/../outside b/../outside\nnew file mode 100644\n--- /dev/null\n+++ b/../outside\n@@ -0,0 +1 @@\n+pwned\n",
        "diff --git a/blob.bin b/blob.bin\nnew file mode 100644\nindex 0000000..e69de29\nBinary files /dev/null and b/blob.bin differ\n",
        "git-binary-patch",
    ],
    ids=["dot-git", "outside", "binary-files-differ", "git-binary-patch"],
)
def test_unsafe_patches_are_refused(ws, diff, tmp_path):
    diff = binary_diff(tmp_path) if diff == "git-binary-patch" else diff
    before = world(ws)
    with pytest.raises(PatchError, match="refusing"):
        ws.check_patch(diff)
    with pytest.raises(PatchError, match="refusing"):
        ws.apply_and_commit(diff, "evil", TRAILERS)
    assert world(ws) == before
    assert not (ws.root.parent / "outside").exists()


def test_apply_is_idempotent_and_completes_an_interrupted_apply(ws):
    first = ws.apply_and_commit(PATCH, "p", TRAILERS)
    assert ws.apply_and_commit(PATCH, "p", TRAILERS) == first
    assert ws.repo.git.rev_list("--count", "HEAD") == "2"
    # As if the process died after moving the branch, before patching index and working tree.
    patch_file = ws.root.parent / "p.diff"
    patch_file.write_text(PATCH)
    ws.repo.git.apply("-R", "--cached", str(patch_file))
    ws.repo.git.apply("-R", str(patch_file))
    assert ws.apply_and_commit(PATCH, "p", TRAILERS) == first
    assert ws.read_file("pkg/mod.py").count("line 10 patched") == 1
    assert ws.repo.git.status("--porcelain") == ""


def test_find_commit_matches_trailer_values_exactly(ws):
    ws.apply_and_commit(PATCH, "p", {**TRAILERS, "Perfloop-Iteration": "12"})
    assert ws.find_commit({**TRAILERS, "Perfloop-Iteration": "1"}) is None
    assert ws.find_commit({"Perfloop-Iteration": "12"}).subject == "p"


def test_revert_tip_restores_everything_and_is_idempotent(ws):
    user_changes(ws)
    before = ws.snapshot()
    commit = ws.apply_and_commit(PATCH, "p", TRAILERS)
    ws.revert_commit(commit)
    assert ws.snapshot() == before
    ws.revert_commit(commit)
    assert ws.snapshot() == before
    assert ws.find_commit(TRAILERS) is None


def test_revert_of_an_older_commit_adds_a_revert_commit(ws):
    first = ws.apply_and_commit(PATCH, "p1", TRAILERS)
    ws.apply_and_commit(
        make_diff("pkg/mod.py", 16, "line 16", "line 16 patched"),
        "p2",
        {**TRAILERS, "Perfloop-Iteration": "2"},
    )
    ws.revert_commit(first)
    ws.revert_commit(first)
    git = ws.repo.git
    assert git.log("--format=%s") == 'Revert "p1"\np2\np1\nperfloop: import src'
    assert git.log("-1", "--format=%(trailers:key=Perfloop-Reverts,valueonly)").strip() == first.sha
    assert ws.read_file("pkg/mod.py") == edit(ORIGINAL, "line 16\n", "line 16 patched\n")
    assert git.status("--porcelain") == ""
    assert ws.find_commit(TRAILERS) is None


def test_commits_only_on_a_session_branch(ws):
    ws.ensure_branch("main")
    with pytest.raises(PatchError, match="ensure_branch"):
        ws.apply_and_commit(PATCH, "p", TRAILERS)


def test_ensure_branch_keeps_work_and_refuses_to_lose_it(ws):
    user_changes(ws)
    before = ws.snapshot()
    ws.ensure_branch("perfloop/s2")
    ws.ensure_branch("perfloop/s2")
    assert ws.snapshot() == before.model_copy(update={"branch": "perfloop/s2"})
    (ws.root / "pkg/mod.py").write_text(ORIGINAL)
    ws.repo.git.add("pkg/mod.py")
    ws.apply_and_commit(PATCH, "p", TRAILERS)
    ws.ensure_branch("main")
    (ws.root / "pkg/mod.py").write_text(edit(ORIGINAL, "line 10\n", "line 10 user\n"))
    kept = world(ws)
    with pytest.raises(PatchError, match="cannot switch to branch perfloop/s2") as err:
        ws.ensure_branch("perfloop/s2")
    assert "\n" not in str(err.value)
    assert world(ws) == kept


def test_changed_files_lists_every_path(ws):
    both = PATCH + make_diff("other.py", 10, "line 10", "x")
    assert ws.changed_files(both) == ["pkg/mod.py", "other.py"]
    with pytest.raises(PatchError, match="empty"):
        ws.changed_files("  \n")


def test_git_checkout_stash_and_reset_are_never_run(ws, tmp_path, monkeypatch):
    log = tmp_path / "git.log"
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {log}\nexec {shutil.which("git")} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    user_changes(ws)
    commit = ws.apply_and_commit(PATCH, "p", TRAILERS)
    ws.revert_commit(commit)
    ws.ensure_branch("perfloop/s3")
    with pytest.raises(PatchError, match=r"^patch does not apply: pkg/mod\.py:7 \(git apply --check\)"):
        ws.apply_and_commit(make_diff("pkg/mod.py", 10, "nope", "x"), "bad", TRAILERS)
    subcommands = set(log.read_text().split())  # the first argument: we never pass global options
    assert "apply" in subcommands and "commit-tree" in subcommands
    assert not {"checkout", "stash", "reset", "restore", "clean"} & subcommands
    source = Path(git_workspace.__file__).read_text()
    assert not any(word in source for word in ('"checkout"', '"stash"', '"reset"'))


def test_abandon_branch_goes_back_to_before_a_killed_trial_with_its_commit_gone(ws):
    """A parallel trial killed after committing on its own branch, run again: the checkout goes
    back to what it was on before (a branch, or a detached commit), the trial branch and its commit
    are deleted, the user's uncommitted work is carried along; a switch that would overwrite the
    user's work is refused with nothing changed."""
    trial = "perfloop/s1-trial1-b"
    ws.ensure_branch("main")  # the host's checkout as the trial found it, with the user's work
    (ws.root / "README.md").write_text("demo, edited\n")
    (ws.root / "notes.txt").write_text("mine\n")
    before = ws.snapshot()
    ws.abandon_branch(trial)  # not on it: nothing to do
    assert ws.snapshot() == before
    ws.ensure_branch(trial)
    ws.apply_and_commit(PATCH, "candidate", TRAILERS)
    ws.abandon_branch(trial)
    assert ws.snapshot() == before
    assert not ws._ok("rev-parse", "--verify", "-q", f"refs/heads/{trial}")

    ws._git("switch", "-q", "--detach", "main")
    detached = ws.snapshot()
    ws.ensure_branch(trial)
    ws.apply_and_commit(PATCH, "candidate", TRAILERS)
    ws.abandon_branch(trial)
    assert ws.snapshot() == detached and detached.branch is None

    ws.ensure_branch(trial)
    ws.apply_and_commit(PATCH, "candidate", TRAILERS)
    (ws.root / "pkg/mod.py").write_text((ws.root / "pkg/mod.py").read_text() + "user line\n")
    kept = world(ws)
    with pytest.raises(PatchError, match=f"cannot switch back from {trial}") as err:
        ws.abandon_branch(trial)
    assert "\n" not in str(err.value) and world(ws) == kept
