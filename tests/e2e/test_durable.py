"""Durable sessions: SIGKILL at every point then resume, replay, export/import, locks, edits, fork,
secrets. Real CLI processes, real servers, real git repos; on both stores, SQLite under
$PERFLOOP_HOME and a real PostgreSQL server (tests/pg.py), each test with a database of its own,
where the stores can differ: the kill-at-every-point sweep arms every point on SQLite and one point
of each kind on PostgreSQL (`armed`), and the edited-patch validation, which never reads the store
differently, runs on SQLite only (`ONE_STORE`)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    PERFLOOP,
    assert_clean,
    edited_diff,
    git,
    kept_unless_drifted,
    last_json,
    make_repo,
    playbook_variant,
    write_target,
)
from tests.forkcli import ForkedCli
from tests.pg import PgServer
from tests.procs import processes_in
from tools.store.db import Db
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e
BACKEND = "mla_server/attention/mla_backend.py"
RUNNER = "mla_server/model_runner.py"
FIX = [
    (
        "k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)",
        "k_buffer = self.kv_pool.get_key_buffer(layer_id)",
    ),
    ("k_buffer[kv_indices], causal=False)", "k_buffer[kv_indices].to(q.dtype), causal=False)"),
]


def dirty(repo: Path) -> dict[str, str]:
    """The user's uncommitted work, in the instrumented and the patched file; returns it."""
    (repo / RUNNER).write_text("# user: local tweak\n" + (repo / RUNNER).read_text())
    (repo / BACKEND).write_text((repo / BACKEND).read_text() + "\n# user: note\n")
    return {RUNNER: "# user: local tweak\n", BACKEND: "\n# user: note\n"}


def tree(repo: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.parts and "__pycache__" not in p.parts
    }


def with_bad_playbook(tmp_path: Path, repo: Path) -> Path:
    """A playbook proposed first whose patch changes outputs: it is measured and rolled back."""
    books = tmp_path / "books"
    if not books.exists():
        playbook_variant(
            books,
            "bad-changes-outputs",
            1.0,
            edited_diff(repo, tmp_path, {BACKEND: [*FIX, ("* self.scaling", "* self.scaling * 3.0")]}),
        )
    return books


_ZYGOTE: list[ForkedCli] = []


@pytest.fixture(scope="module", autouse=True)
def zygote(tmp_path_factory) -> Iterator[ForkedCli]:
    """One pre-imported interpreter for the module's `perfloop` commands (tests/forkcli.py)."""
    with ForkedCli(tmp_path_factory.mktemp("cli"), dict(os.environ)) as z:
        _ZYGOTE.append(z)
        yield z
        _ZYGOTE.clear()


def perfloop(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`perfloop ARGS` with its own PERFLOOP_HOME and no stdin, like tests/e2e/conftest.perfloop,
    as a forked child of the module's zygote."""
    return _ZYGOTE[0](*args, env={**os.environ, "PERFLOOP_HOME": str(home), **(env or {})})


ONE_STORE = {
    "test_edited_patches_are_validated_and_recorded",
    "test_fork_keeps_what_its_parent_kept",
    "test_show_diff_picks_a_proposal_by_number",
}
"""Tests that prove nothing engine-specific: the patch checks run before any store write."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`engine`: the store a test runs on; both, except for the tests in ONE_STORE (module-scoped,
    so the recorded session is made once per store)."""
    if "engine" in metafunc.fixturenames:
        one = metafunc.function.__name__ in ONE_STORE
        metafunc.parametrize("engine", ["sqlite"] if one else ["sqlite", "postgres"], scope="module")


def armed(points: list[str], engine: str) -> list[str]:
    """The fault points the sweep kills at, in the traced order. On SQLite every `node:` point (each
    transition, right after its checkpoint was written) and, at each node's first visit, every other
    point (`tool:` after a side effect before its record, and each kind inside a tool): the second
    candidate and the second iteration run the same nodes' tools again in the same order, with the
    same store operations, so of theirs only a point new to its node is armed (the accepted
    candidate's `tool:bench.outputs`). On PostgreSQL the first point of each kind and the last one:
    the engines differ only in how the store writes and reads a checkpoint, a call's record and the
    lease, which every kind of point crosses in its own way; the other points of a kind repeat the
    same store operations between other steps, which the SQLite sweep covers."""
    if engine == "sqlite":
        seen: set[tuple[str, str]] = set()
        kept: list[str] = []
        node = ""
        for p in points:
            node = p if p.startswith("node:") else node
            if p.startswith("node:") or (node, p) not in seen:
                seen.add((node, p))
                kept.append(p)
        return kept
    firsts = {p.split(":", 1)[0]: i for i, p in reversed(list(enumerate(points)))}
    return [points[i] for i in sorted({*firsts.values(), len(points) - 1})]


def new_store(engine: str, pg_server: PgServer) -> str:
    """A PERFLOOP_STORE value: empty for SQLite, else the URL of a fresh, empty database."""
    return pg_server.url(pg_server.new_db()) if engine == "postgres" else ""


@pytest.fixture(autouse=True)
def store(engine: str, pg_server: PgServer, monkeypatch) -> str:
    """A fresh store for the test, as PERFLOOP_STORE (which every CLI run here inherits); a test
    that reads the recorded session switches to its store (`on_recorded`)."""
    url = new_store(engine, pg_server)
    monkeypatch.setenv("PERFLOOP_STORE", url)
    return url


def on_recorded(recorded: dict, monkeypatch) -> None:
    """Use the recorded session's store from here on."""
    monkeypatch.setenv("PERFLOOP_STORE", recorded["url"])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, engine: str, pg_server: PgServer) -> dict:
    """One uninterrupted session (dirty tree, a rolled-back and an accepted patch), fault points traced."""
    tmp = tmp_path_factory.mktemp("recorded")
    repo = make_repo(tmp / "engine")
    books = with_bad_playbook(tmp, repo)
    dirty(repo)
    trace = tmp / "points.txt"
    url = new_store(engine, pg_server)
    env = {
        **os.environ,
        "PERFLOOP_HOME": str(tmp / "home"),
        "PERFLOOP_FAULTS_TRACE": str(trace),
        "PERFLOOP_STORE": url,
    }
    proc = subprocess.run(
        [
            str(PERFLOOP),
            "run",
            "--approve",
            "auto",
            str(write_target(tmp / "t.toml", repo, looks=1)),
            "--json",
            "--playbooks",
            str(books),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {
        "tmp": tmp,
        "repo": repo,
        "home": tmp / "home",
        "books": books,
        "summary": last_json(proc),
        "points": trace.read_text().split(),
        "url": url,
    }


def test_uninterrupted_reference_run(recorded: dict) -> None:
    s = recorded["summary"]
    assert s["accepted"] == ["kv-cache-full-pool-cast"] and s["rejected"] == ["bad-changes-outputs"]
    points = recorded["points"]
    for p in (
        "node:prepare",
        "node:rollback",
        "git:ref-moved",
        "git:revert-ref-moved",
        "server:spawned",
        "profile:requested",
        "tool:repo.revert_commit",
        "node:finish",
    ):
        assert p in points


@pytest.mark.timeout(1800)  # a kill inside a measuring node re-measures: slow on a loaded machine
def test_sigkill_at_every_point_then_resume_matches_uninterrupted(
    tmp_path: Path, home: Path, recorded: dict, engine: str
) -> None:
    repo = make_repo(tmp_path / "engine")
    books = with_bad_playbook(tmp_path, repo)
    user = dirty(repo)
    points = armed(recorded["points"], engine)
    assert {p.split(":", 1)[0] for p in points} == {"node", "tool", "git", "server", "profile"}
    if engine == "sqlite":  # every point the session reaches, each transition every time
        assert set(points) == set(recorded["points"])
        assert [p for p in points if p.startswith("node:")] == [
            p for p in recorded["points"] if p.startswith("node:")
        ]
    faults = tmp_path / "faults.txt"
    faults.write_text("".join(p + "\n" for p in points))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return perfloop(home, *args, env={"PERFLOOP_FAULTS_FILE": str(faults)})

    first = cli(
        "run",
        "--approve",
        "auto",
        str(write_target(tmp_path / "t.toml", repo, looks=1)),
        "--json",
        "--playbooks",
        str(books),
    )
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    session = last_json(cli("sessions", "--json"))[0]["id"]
    kills = 1
    for _ in range(len(points) + 5):
        proc = cli("resume", session, "--json")
        if proc.returncode != -signal.SIGKILL:
            break
        kills += 1
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert faults.read_text() == "", "some fault points were never reached"
    assert kills == len(points)
    s, ref = last_json(proc), recorded["summary"]
    kept = kept_unless_drifted(s["accepted"] == ref["accepted"], s["decision"])
    if kept:
        assert (s["rejected"], s["outputs_identical"]) == (ref["rejected"], True)
        assert git(repo, "rev-list", "--count", f"main..{s['branch']}").strip() == "1"
        assert tree(repo) == tree(recorded["repo"])  # same files, byte for byte, as the uninterrupted run
    for rel, mark in user.items():
        assert mark in (repo / rel).read_text()
    assert_clean(repo, s)
    shown = last_json(cli("show", session, "--json"))
    assert [d["verdict"] for d in shown["decisions"]] == ["rejected", "accepted" if kept else "inconclusive"]
    # The recording holds every killed attempt's calls, marked superseded; replay follows the rest.
    store = SessionStore.open(home)
    every = store.tool_calls(session, include_superseded=True)
    superseded = len(every) - len(store.tool_calls(session))
    assert superseded > 0
    # Each resume numbered its launches past the killed attempts' (issue 63 item 8), those killed
    # before their record too (their pid file): no launch number, log or server mark twice
    numbers = [c.input["launch_number"] for c in every if c.name == "server.launch"]
    assert len(numbers) == len(set(numbers)), numbers
    replayed = cli("replay", session, "--json")
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    assert last_json(replayed)["matches_recording"] is True


def test_replay_answers_from_the_recording_without_the_host(
    recorded: dict, tmp_path: Path, monkeypatch
) -> None:
    """In-process replay with sockets and process creation forbidden and the target repo gone."""
    import shutil
    import socket

    from agent.sessions.runner import Sessions

    on_recorded(recorded, monkeypatch)

    home = tmp_path / "home"
    shutil.copytree(recorded["home"], home)
    gone = tmp_path / "repo-gone"
    recorded_repo = recorded["repo"]
    shutil.copytree(recorded_repo, gone)
    shutil.rmtree(recorded_repo)
    try:

        def forbidden(*a, **k):
            raise AssertionError("replay tried to open a socket or start a process")

        monkeypatch.setattr(socket, "socket", forbidden)
        monkeypatch.setattr(subprocess, "Popen", forbidden)
        monkeypatch.setattr(os, "fork", forbidden)
        s = Sessions(home)
        sid = recorded["summary"]["session"]
        t0 = time.monotonic()
        state, summary = s.replay(sid)
        assert time.monotonic() - t0 < 5
        assert summary == s.info(sid).summary
        assert [d.verdict for d in state.decisions] == ["rejected", "accepted"]
        assert not recorded_repo.exists()
    finally:
        monkeypatch.undo()
        shutil.copytree(gone, recorded_repo)


def test_replay_cli_export_import_and_divergence(
    recorded: dict, tmp_path: Path, engine: str, pg_server: PgServer, monkeypatch
) -> None:
    sid = recorded["summary"]["session"]
    out = tmp_path / "session.json.gz"
    on_recorded(recorded, monkeypatch)
    assert perfloop(recorded["home"], "export", sid, "-o", str(out)).returncode == 0
    other, elsewhere = tmp_path / "elsewhere", new_store(engine, pg_server)  # another machine's store
    monkeypatch.setenv("PERFLOOP_STORE", elsewhere)
    imported = perfloop(other, "import", str(out))
    assert imported.returncode == 0 and sid in imported.stdout
    twice = perfloop(other, "import", str(out))
    assert twice.returncode == 2  # refuses to overwrite
    where, hint = (
        (other, "another PERFLOOP_HOME")
        if engine == "sqlite"
        else (elsewhere.replace(f":{pg_server.password}@", "@"), "another database (--store)")
    )
    assert twice.stderr == f"error: session {sid} already exists in {where}; import into {hint}\n"
    t0 = time.monotonic()
    rep = perfloop(other, "replay", sid, "--json")
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert last_json(rep)["matches_recording"] is True and time.monotonic() - t0 < 15

    db = Db(elsewhere or None, other / "sessions.sqlite")
    rows = db.rows(
        "SELECT seq, record FROM tool_calls WHERE session_id = ? AND record LIKE ? ORDER BY seq",
        (sid, '%"name":"bench.measure"%'),
    )
    seq, record = rows[0]
    db.run(
        "UPDATE tool_calls SET record = ? WHERE session_id = ? AND seq = ?",
        (record.replace('"label":"baseline"', '"label":"tampered"'), sid, seq),
    )
    db.close()
    diverged = perfloop(other, "replay", sid)
    assert diverged.returncode == 1
    assert f"call #{seq} (bench.measure from node baseline) has different input" in diverged.stderr
    assert ".label: recorded 'tampered', now 'baseline'" in diverged.stderr


FIXTURE = Path(__file__).resolve().parents[1] / "data" / "sessions" / "demo-session.json.gz"


def test_shipped_demo_recording_replays(tmp_path: Path) -> None:
    """A real recorded `perfloop demo` session, shipped as a fixture, replays without its host."""
    home = tmp_path / "home"
    sid = perfloop(home, "import", str(FIXTURE)).stdout.split()[2].rstrip(";")
    t0 = time.monotonic()
    rep = perfloop(home, "replay", sid, "--json")
    elapsed = time.monotonic() - t0
    assert rep.returncode == 0, rep.stderr[-2000:]
    s = last_json(rep)
    assert s["matches_recording"] and s["accepted"] == ["kv-cache-full-pool-cast"]
    assert (
        s["speedup"] or s["speedup_baseline_final"]
    ) > 3  # judged, or (recorded before the CI rule) baseline -> final
    # Played back, not re-run: the live session took minutes (two launches, a profile); the bound
    # is loose because CI machines are shared (a timing claim belongs in benchmarks/).
    assert elapsed < 30


@pytest.fixture(scope="module")
def finished(tmp_path_factory, engine: str, pg_server: PgServer, zygote: ForkedCli) -> dict:
    """One uninterrupted session on a clean tree (`run --max-iterations 1`, the fix accepted), and
    what a `resume` of it started while it ran answered: test_concurrent_resume_is_refused checks
    that answer, test_fork_at_every_decision_step forks the session (each made its own before)."""
    tmp = tmp_path_factory.mktemp("finished")
    repo, home, url = make_repo(tmp / "engine"), tmp / "home", new_store(engine, pg_server)
    env = {**os.environ, "PERFLOOP_HOME": str(home), "PERFLOOP_STORE": url}
    runner = subprocess.Popen(
        [
            str(PERFLOOP),
            "run",
            "--approve",
            "auto",
            str(write_target(tmp / "t.toml", repo, looks=1)),
            "--json",
            "--max-iterations",
            "1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not processes_in(repo) and time.monotonic() < deadline:
            time.sleep(0.2)
        sid = last_json(perfloop(home, "sessions", "--json", env={"PERFLOOP_STORE": url}))[0]["id"]
        second = perfloop(home, "resume", sid, env={"PERFLOOP_STORE": url})
        servers = len(processes_in(repo))
        out, errs = runner.communicate(timeout=600)
    finally:
        runner.kill()
    assert runner.returncode == 0, errs[-2000:]
    return {
        "repo": repo,
        "home": home,
        "url": url,
        "runner": runner.pid,
        "session": sid,
        "second": second,
        "servers": servers,
        "summary": last_json(subprocess.CompletedProcess([], 0, out, errs)),
        "left": processes_in(repo),
    }


def test_concurrent_resume_is_refused(finished: dict) -> None:
    """A `resume` while `run` runs the session is refused in one line; the run goes on undisturbed."""
    sid, second = finished["session"], finished["second"]
    assert second.returncode == 2
    assert f"session {sid} is already being run by perfloop process {finished['runner']}" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    assert finished["servers"] <= 2  # the one server (bash exec'd into python) at most
    assert finished["summary"]["session"] == sid and finished["summary"]["server_launches"] == 2
    assert finished["left"] == []


def test_edited_patches_are_validated_and_recorded(tmp_path: Path, home: Path, repo: Path) -> None:
    good = edited_diff(
        repo,
        tmp_path,
        {BACKEND: [*FIX, ("real = len(batch.kv_indices)", "real = len(batch.kv_indices)  # reviewed")]},
    )
    paused = last_json(
        perfloop(
            home,
            "run",
            str(write_target(tmp_path / "t.toml", repo, looks=1)),
            "--approve",
            "manual",
            "--json",
            "--max-iterations",
            "1",
        )
    )
    sid = paused["session"]
    before = tree(repo)
    malicious = {
        "escape": good.replace(f"a/{BACKEND}", "a/../outside.py").replace(f"b/{BACKEND}", "b/../outside.py"),
        "gitdir": "diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n"
        "@@ -1 +1,2 @@\n [core]\n+\tfsmonitor = touch /tmp/pwned\n",
        "binary": "diff --git a/x.bin b/x.bin\nnew file mode 100644\nindex 0000000..1111111\n"
        "Binary files /dev/null and b/x.bin differ\n",
        "stale": good.replace("real = len", "real = LEN"),
        "absolute": good.replace(f"+++ b/{BACKEND}", "+++ /tmp/perfloop-outside.py"),
        "symlink-out": "diff --git a/escape b/escape\nnew file mode 120000\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/escape\n@@ -0,0 +1 @@\n+{tmp_path}\n\\ No newline at end of file\n",
        "huge": good + "\n" * (50 * 1024 * 1024),
    }
    outside = "patches may only touch files inside the repository, outside .git/; fix the diff's paths"
    refusal = {
        "escape": f"patch refused: path '../outside.py': {outside}",
        "gitdir": f"patch refused: path '.git/config': {outside}",
        "binary": "patch refused: line 4: binary hunk; send text diffs only (a playbook may declare binary "
        "patches)",
        "stale": f"patch does not apply: {BACKEND}:22 (git apply --check); regenerate the diff against "
        "the current file",
        "absolute": "patch refused: line 4 names the absolute path /tmp/perfloop-outside.py; paths must be "
        "relative to the repository",
        "symlink-out": "patch refused: line 2 makes a symlink; only regular files (100644 or 100755) may be "
        "patched",
    }
    for name, diff in malicious.items():
        f = tmp_path / f"{name}.diff"
        f.write_text(diff)
        proc = perfloop(home, "approve", sid, "--patch", str(f))
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        expected = (
            f"--patch: patch refused: {f} is {f.stat().st_size} bytes, over the limit of 1048576 "
            "(`max_patch_bytes` in the target)"
            if name == "huge"
            else f"--patch {f}: {refusal[name]}"
        )
        assert proc.stderr == f"error: {expected}\n", proc.stderr
        assert last_json(perfloop(home, "sessions", "--json"))[0]["status"] == "paused"
        assert tree(repo) == before
    # the proposed patch as `show --diff` prints it (the session folder keeps the same file), edited
    # as a reviewer would (a comment on an added line), handed back by its prefix and `last`
    shown_diff = perfloop(home, "show", sid[:15], "--diff")
    assert shown_diff.returncode == 0 and shown_diff.stdout.startswith("diff --git"), shown_diff.stderr
    (kept,) = (home / "sessions" / sid / "proposals").glob("1-*.diff")
    assert kept.read_text() == shown_diff.stdout
    added = next(
        x for x in shown_diff.stdout.splitlines() if x[:1] == "+" and x[:3] != "+++" and x[-1:] != "\\"
    )
    edited = shown_diff.stdout.replace(added + "\n", added + "  # reviewed\n", 1)
    (tmp_path / "good.diff").write_text(edited)
    done = perfloop(home, "approve", "last", "--patch", str(tmp_path / "good.diff"), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    s = last_json(done)
    assert s["accepted"] == ["human-edited patch (replacing kv-cache-full-pool-cast)"], (
        s["rejected"],
        s["decision"],
    )
    commit = git(repo, "show", s["branch"])
    assert "# reviewed" in commit and "Perfloop-Edited: human" in commit
    assert "Perfloop-Playbook" not in commit and "Perfloop-Replaces: kv-cache-full-pool-cast" in commit
    assert "human-edited patch" in git(repo, "log", "-1", "--format=%s", s["branch"])
    shown = last_json(perfloop(home, "show", sid, "--json"))
    assert "human-edited patch" in shown["decisions"][-1]["reason"]
    assert shown["decisions"][-1]["edited"] is True
    assert shown["decisions"][-1]["label"] == s["accepted"][0]
    assert "human-edited patch (replacing" in perfloop(home, "show", sid, env={"COLUMNS": "300"}).stdout
    assert_clean(repo, s)


def test_show_diff_picks_a_proposal_by_number(recorded: dict, tmp_path: Path, monkeypatch) -> None:
    """`show SESSION --diff [N]` on the recorded session (two proposals: the rolled-back one that
    changes outputs, then the kept cast fix): `--diff 1` the first's patch, `--diff` alone the last,
    each a plain unified diff that applies to the commit the session started from; a number past
    the proposals, or a number without --diff, is one line and exit 2."""
    on_recorded(recorded, monkeypatch)
    home, sid = recorded["home"], recorded["summary"]["session"]
    shown = last_json(perfloop(home, "show", sid, "--json"))
    assert [d["playbook"] for d in shown["decisions"]] == ["bad-changes-outputs", "kv-cache-full-pool-cast"]
    first, last, second = (
        perfloop(home, "show", sid, *a) for a in (["--diff", "1"], ["--diff"], ["2", "--diff"])
    )
    for p in (first, last, second):
        assert p.returncode == 0 and p.stdout.startswith(f"diff --git a/{BACKEND}"), p.stderr
    assert "* self.scaling * 3.0" in first.stdout and "* self.scaling * 3.0" not in last.stdout
    assert "k_buffer[kv_indices].to(q.dtype)" in last.stdout and last.stdout == second.stdout
    start = tmp_path / "start"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(recorded["repo"]), str(start)], check=True)
    for p in (first, last):
        check = subprocess.run(
            ["git", "-C", str(start), "apply", "--check", "-"], input=p.stdout, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stderr
    past, bare = perfloop(home, "show", sid, "--diff", "3"), perfloop(home, "show", sid, "1")
    assert (past.returncode, past.stdout) == (2, "")
    assert past.stderr == "error: --diff 3: the session made 2 proposal(s), numbered 1-2\n", past.stderr
    assert (bare.returncode, bare.stdout) == (2, "")
    assert bare.stderr == "error: N (1) selects a proposal's patch: add --diff (show SESSION --diff N)\n"


def test_fork_refuses_to_move_a_dirty_tree(recorded: dict, monkeypatch) -> None:
    """The user's uncommitted edit sits in the patched file: going back would touch it, so no."""
    on_recorded(recorded, monkeypatch)
    home, parent, repo = recorded["home"], recorded["summary"]["session"], recorded["repo"]
    before, head = tree(repo), git(repo, "rev-parse", "HEAD")
    bad = perfloop(home, "fork", parent, "--at", "measure")
    assert bad.returncode == 2 and "fork at one of" in bad.stderr
    forked = perfloop(home, "fork", parent, "--at", "approve#2", "--json")
    assert forked.returncode == 1
    assert "without losing uncommitted changes" in last_json(forked)["stop_reason"]
    assert tree(repo) == before and git(repo, "rev-parse", "HEAD") == head
    assert_clean(repo, recorded["summary"])


def test_fork_at_every_decision_step(finished: dict, monkeypatch) -> None:
    """From one ended session (the module's `finished`): a fork at `approve` rejects what the parent
    accepted; forks at `propose`, `diagnose` and `profile` reuse the parent's diagnosis, re-read its
    profile, or launch and profile afresh, and each pauses at the same proposal. Every fork ends on
    its own branch at the parent's starting commit with a clean tree and no server."""
    on_recorded(finished, monkeypatch)
    home, repo, parent = finished["home"], finished["repo"], finished["summary"]
    assert parent["accepted"] == ["kv-cache-full-pool-cast"]
    store = SessionStore.open(home)
    (parent_read,) = [c for c in store.tool_calls(parent["session"]) if c.name == "profile.read"]

    def reject(fork: dict, reason: str) -> dict:
        done = last_json(perfloop(home, "reject", fork["session"], "--reason", reason, "--json"))
        assert done["status"] == "done" and done["accepted"] == []
        assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == (done["checkout"] or done["branch"])
        assert git(repo, "rev-list", "--count", "main..HEAD").strip() == "0"
        assert "Gather-then-cast" not in (repo / BACKEND).read_text()
        assert git(repo, "status", "--porcelain") == ""
        assert_clean(repo)
        return last_json(perfloop(home, "show", fork["session"], "--json"))

    forked = perfloop(home, "fork", parent["session"], "--at", "approve", "--approve", "manual", "--json")
    assert forked.returncode == 0, forked.stderr[-2000:]
    f = last_json(forked)
    assert f["status"] == "paused"
    shown = reject(f, "try without it")
    assert shown["parent"] == parent["session"]
    assert [t["node"] for t in shown["transitions"]][:2] == ["reconcile", "approve"]

    after = {
        "propose": ["reconcile", "propose", "approve"],
        "diagnose": ["reconcile", "diagnose", "propose", "approve"],
        "profile": ["reconcile", "profile", "diagnose", "propose", "approve"],
    }
    for step, nodes in after.items():
        forked = perfloop(home, "fork", parent["session"], "--at", step, "--approve", "manual", "--json")
        assert forked.returncode == 0, (step, forked.stderr[-2000:])
        f = last_json(forked)
        assert f["status"] == "paused" and f["server_launches"] == (1 if step == "profile" else 0), f
        calls = store.tool_calls(f["session"])
        reads = [c for c in calls if c.name == "profile.read"]
        if step == "propose":  # the parent's diagnosis, as it was
            assert reads == [] and not [c for c in calls if c.name.startswith(("profile.", "server."))]
        elif step == "diagnose":  # the parent's profile, read again
            assert [r.input["path"] for r in reads] == [parent_read.input["path"]]
        else:  # a server launched on the fork's branch (instrumented) and a new profile taken
            assert [
                c.name for c in calls if c.name in ("repo.instrument", "server.launch", "profile.take")
            ] == [
                "repo.instrument",
                "server.launch",
                "profile.take",
            ]
            assert Path(reads[0].input["path"]).is_relative_to(home / "sessions" / f["session"])
        shown = reject(f, f"forked at {step}")
        assert shown["parent"] == parent["session"]
        assert [t["node"] for t in shown["transitions"]][: len(nodes)] == nodes, step
        assert [(d["playbook"], d["verdict"]) for d in shown["decisions"]] == [
            ("kv-cache-full-pool-cast", "rejected")
        ]


def test_fork_keeps_what_its_parent_kept(finished: dict, monkeypatch) -> None:
    """A fork at `approve` of the session that kept the cast fix (auto-approved, as the parent was)
    checks the candidate on the prompts its inherited reference outputs answer (the parent's
    random ones, not new ones drawn from its own id): the outputs are identical and the fix is kept,
    as the parent kept it; the fork's `outputs_identical` says what its candidate's check found."""
    on_recorded(finished, monkeypatch)
    home, repo, parent = finished["home"], finished["repo"], finished["summary"]
    assert parent["accepted"] == ["kv-cache-full-pool-cast"] and parent["outputs_identical"] is True
    forked = perfloop(home, "fork", parent["session"], "--at", "approve", "--json")
    assert forked.returncode == 0, forked.stderr[-2000:]
    f = last_json(forked)
    shown = last_json(perfloop(home, "show", f["session"], "--json"))
    [decision] = shown["decisions"]
    assert "outputs changed" not in decision["reason"], decision["reason"]
    assert decision["outputs_identical"] is True  # the gate passed: the parent's prompts were used
    assert f["status"] == "done"
    if kept_unless_drifted(f["accepted"] == parent["accepted"], decision["reason"]):
        assert f["outputs_identical"] is True
    assert_clean(repo, f)


def test_secrets_never_reach_store_recordings_exports_or_logs(
    tmp_path: Path, home: Path, repo: Path, store: str, pg_server: PgServer
) -> None:
    secret = "sk-planted-" + os.urandom(8).hex()
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    text = target.read_text()
    seen = tmp_path / "seen.sha"
    target.write_text(
        text.replace(
            'argv = ["bash", "launch.sh",',
            f'pass_env = ["PERFLOOP_TEST_API_KEY"]\nargv = ["bash", "-c", "printf %s \\"$PERFLOOP_TEST_API_KEY\\" '
            f'| sha256sum > {seen} && exec bash launch.sh \\"$@\\"", "launch",',
        )
    )
    env = {**os.environ, "PERFLOOP_HOME": str(home), "PERFLOOP_TEST_API_KEY": secret}
    proc = subprocess.run(  # stopped by the floor once the fix is in (else a second iteration)
        [
            str(PERFLOOP),
            "run",
            "--approve",
            "auto",
            str(target),
            "--json",
            "--max-iterations",
            "2",
            "--floor-ms",
            "1000",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    import hashlib

    assert seen.read_text().split()[0] == hashlib.sha256(secret.encode()).hexdigest()  # it was passed
    sid, stop = last_json(proc)["session"], last_json(proc)["stop_reason"]
    assert stop.startswith("TPOT ") and "is within 2x of the floor 1000 ms" in stop, stop
    export = tmp_path / "export.json"
    subprocess.run([str(PERFLOOP), "export", sid, "-o", str(export)], env=env, check=True)
    leaks = [p for p in [*home.rglob("*"), export] if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaks == []
    if store:  # every table of the database, checkpoints included
        assert secret.encode() not in pg_server.dump(store.rsplit("/", 1)[1])
    assert secret not in proc.stdout + proc.stderr
    literal = tmp_path / "literal.toml"
    literal.write_text(text.replace("env = {", f'env = {{ OPENAI_API_KEY = "{secret}", ', 1))
    refused = perfloop(home, "run", str(literal))
    assert refused.returncode == 2 and "looks like a secret" in refused.stderr
    assert secret not in refused.stderr
