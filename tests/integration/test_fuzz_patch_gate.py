"""Fuzzing the patch gate (Hypothesis) on a real repository holding a symlink that points out of it:
every diff is refused with a PatchError (bad input: exit 2) or passes and then applies or is
refused; never another exception, and nothing appears outside the repository (the `scratch`
fixture checks; the folder the symlink points to stays empty)."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from state.door.calls import ApplyArgs
from state.engines.workspace import PatchPolicy
from tests.integration.test_git_workspace import ORIGINAL, PATCH
from tools.errors import ToolError
from tools.workspace import repo as repo_tools
from tools.workspace.git import GitWorkspace
from tools.workspace.patch_check import gate_patch

PATHS = st.sampled_from(
    [
        "pkg/mod.py",
        "new.py",
        "/etc/passwd",
        "../escape.py",
        "pkg/../../x",
        ".git/config",
        ".GIT/hooks/x",
        "out/x.py",
        "out",
        "link",
        "a b.py",
        '"q.py"',
        "pkg/.git/x",
        "~/x",
        "dir/",
        "",
    ]
)
MODES = st.sampled_from(["100644", "100755", "120000", "160000", "040000", "000000", "100777", "1"])
HEADERS = st.sampled_from(
    [
        "new file mode {m}",
        "deleted file mode {m}",
        "old mode {m}",
        "new mode {m}",
        "index 0000000..1111111 {m}",
        "rename from {p}",
        "rename to {p}",
        "copy to {p}",
        "GIT binary patch",
        "Binary files /dev/null and b/{p} differ",
        "similarity index 90%",
        "--- a/{p}",
        "+++ b/{p}",
        "+++ {p}",
        "@@ -1 +1 @@",
        "@@ -0,0 +1,2 @@",
        "-- ",
        "\\ No newline at end of file",
    ]
)
LINES = st.one_of(
    st.builds(lambda h, m, p: h.format(m=m, p=p), HEADERS, MODES, PATHS),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20).map(
        lambda s: s.replace("\n", "")
    ),
    st.sampled_from([" line 9", "+added", "-line 10", ""]),
)


def new_file(path: str, mode: str, body: list[str]) -> str:
    head = f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n"
    return head + f"@@ -0,0 +1,{len(body)} @@\n" + "".join(f"+{b}\n" for b in body)


SAFE = st.from_regex(r"(pkg/)?[a-z]{1,8}(\.py)?", fullmatch=True)
DIFFS = st.one_of(
    st.builds(
        new_file,
        SAFE,
        st.sampled_from(["100644", "100755"]),
        st.lists(st.text(max_size=8), min_size=1, max_size=3),
    ),
    st.builds(
        new_file,
        PATHS,
        MODES,
        st.lists(st.sampled_from(["x", "/etc/passwd", "../out"]), min_size=1, max_size=3),
    ),
    st.builds(lambda p, q: PATCH.replace("pkg/mod.py", p).replace(f"b/{p}", f"b/{q}", 1), PATHS, PATHS),
    st.builds(
        lambda lines, at: "\n".join([*PATCH.splitlines()[:at], *lines, *PATCH.splitlines()[at:]]) + "\n",
        st.lists(LINES, max_size=5),
        st.integers(min_value=0, max_value=12),
    ),
    st.lists(LINES, max_size=12).map(lambda lines: "\n".join(lines) + "\n"),
)


@pytest.fixture
def world(scratch):
    src = scratch.inputs / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text(ORIGINAL)
    scratch.allow(src)
    outside = scratch.root / "outside"
    outside.mkdir()
    repo = scratch.root / "repo"
    scratch.allow(repo, outside)
    with GitWorkspace.create_from_tree(src, repo) as ws:
        ws.ensure_branch("perfloop/s1")
    os.symlink(outside, repo / "out")
    os.symlink("pkg/mod.py", repo / "link")
    yield repo, outside
    assert list(outside.iterdir()) == [], "a patch wrote through the symlink"
    shutil.rmtree(repo / ".git" / "rr-cache", ignore_errors=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(diff=DIFFS, binary=st.booleans())
def test_the_gate_refuses_or_passes_never_crashes(world, diff: str, binary: bool) -> None:
    repo, outside = world
    policy = PatchPolicy(allow_binary=binary, max_bytes=4096)
    try:
        files = gate_patch(repo, diff, policy)
    except ToolError as exc:
        assert "\n" not in str(exc)
        event(f"refused: {str(exc).split(':')[1].strip()[:20]}")
        return
    event("passed the gate")
    for rel in files:
        assert not rel.startswith("/") and ".." not in rel.split("/") and ".git" not in rel.lower().split("/")
        assert (repo / rel).resolve().is_relative_to(repo.resolve())
    n = len(list(repo.glob("**/*")))
    try:
        repo_tools.apply_patch(
            ApplyArgs(
                repo=repo, diff=diff, subject="fuzz", trailers={"Perfloop-Session": f"s{n}"}, policy=policy
            )
        )
    except ToolError:
        event("passed, then refused by apply")
    links = [p for p in repo.rglob("*") if p.is_symlink() and p.name not in ("out", "link")]
    assert links == [], "a patch created a symlink"
    assert list(outside.iterdir()) == []
