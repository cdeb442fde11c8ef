"""The whole loop on the CPU demo target, through the real CLI, with real servers and git repos."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from agent.sessions.runner import Sessions
from tests.e2e.conftest import (
    LOOP_NODES,
    assert_clean,
    confirming_launches,
    edited_diff,
    git,
    kept_unless_drifted,
    last_json,
    make_repo,
    perfloop,
    playbook_variant,
    processes_in,
    write_target,
)
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e
# The sessions here run their targets at `looks=1` (tests/e2e/conftest.write_target): none proves
# a timing verdict near the bar (the fix's ~9x is kept at its first look), and three looks only made
# the baseline, and an accepted candidate, measure three times as many requests.

BACKEND = "mla_server/attention/mla_backend.py"
RUNNER = "mla_server/model_runner.py"


def quietest_gap_s(stderr: str, ended: float) -> float:
    """The longest time between two progress lines of `stderr` (`YYYY-mm-dd HH:MM:SS perfloop: ...`),
    the last one and `ended` included."""
    stamps = [
        datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").timestamp()
        for line in stderr.splitlines()
        if line[:4].isdigit() and " perfloop: " in line
    ]
    assert len(stamps) >= 5, stderr[-3000:]
    gaps = [b - a for a, b in zip(stamps, [*stamps[1:], ended], strict=True)]
    tail = " (the last line to the end)" if gaps[-1] == max(gaps) else ""
    print(f"{len(stamps)} progress lines, the longest gap {max(gaps):.0f} s{tail}")
    return max(gaps)


def seconds_of(span: str) -> float:
    """`48 s`, `2 min 05 s`, `12 min` as seconds."""
    m = re.fullmatch(r"(?:(\d+) min)? ?(?:(\d+) s)?", span.strip())
    assert m and span.strip(), span
    return 60 * float(m[1] or 0) + float(m[2] or 0)


def test_demo_accepts_gather_then_cast(home: Path) -> None:
    """`perfloop demo`: patch accepted, >=3x TPOT with its CI, identical outputs, clean tree, and
    2 launches per patch (the candidate, and its reference beside it) after the baseline.

    The demo server at one layer of its four (`--server-args`, like every e2e target and the SSH
    demo): the unpatched server does a sixth of the work, the fix keeps its ratio (~9x here); the
    full CPU preset's >= 3x is tests/target/test_fix.py's, measured on the two servers directly.

    Its stderr is a pipe, as in `perfloop demo > log 2>&1`: progress is timestamped lines, the
    steps among them, never 10 s apart while the session runs (`quietest_gap_s`)."""
    proc = perfloop(home, "demo", "--server-args=--layers 1", "--json", env={"PERFLOOP_PROGRESS": "plain"})
    ended = time.time()
    assert proc.returncode == 0, proc.stderr[-2000:]
    # steps have lines of their own; how many depends on the machine's speed (a step reported within
    # 3 s of the line before is superseded by the next line, if one comes first): 2 of 9 in one CI run
    assert proc.stderr.count(" perfloop: step ") >= 1, proc.stderr
    assert quietest_gap_s(proc.stderr, ended) <= 10.0, proc.stderr[-3000:]
    s = last_json(proc)
    assert s["speedup_ci"][0] <= s["speedup_judged"] <= s["speedup_ci"][1], s  # one comparison
    assert s["status"] == "done"
    assert s["accepted"] == ["kv-cache-full-pool-cast"]
    assert s["outputs_identical"] is True
    assert s["speedup"] >= 3.0, s
    assert "95% CI" in s["decision"] and "arms interleaved" in s["decision"], s["decision"]
    assert s["speedup_ci"][0] > 1.02, s
    # the power, fixed on the baseline (no A/A pairs beside it: the demo target sets auto_aa_pairs = 0)
    assert s["power"].startswith("power: keeps gains >= ") and "interleaved A/A pairs" in s["power"], s
    assert s["profile_method"] == "patch"
    # the output gate's policy, the baseline's own variation (its batch at once and staggered
    # against its texts alone) and why the fix passed, in the summary and on the decision
    gate = s["output_gate"]
    assert gate.startswith("exact alone; ") and "batched texts equal its texts alone" in gate, gate
    assert "kv-cache-full-pool-cast: outputs identical alone" in gate, gate
    # published per host and engine: this home's one baseline so far (the CPU's batch moves none)
    assert re.search(r"; this host and engine: 0/\d+ batched texts moved over 1 baseline \(0%\)", gate), gate
    repo = Path(s["repo"])
    assert_clean(repo, s)
    assert git(repo, "status", "--porcelain") == ""
    log = git(repo, "log", "--format=%H%n%B", "-1")
    assert s["commits"][0] in log
    assert f"Perfloop-Session: {s['session']}" in log
    assert "Perfloop-Playbook: kv-cache-full-pool-cast" in log
    assert git(repo, "diff", "--name-only", "HEAD~1", "HEAD").split() == [BACKEND]

    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    # the baseline, then per patch the candidate and its reference, and a confirming pair if any
    assert s["server_launches"] == 1 + 2 * len(s["accepted"]) + confirming_launches(shown["decisions"])
    nodes = [t["node"] for t in shown["transitions"]]
    assert shown["decisions"][0]["output_gate"] in gate, shown["decisions"][0]
    assert nodes[:13] == LOOP_NODES
    assert nodes[-1] == "finish"
    assert shown["tool_calls"] >= 10
    listed = last_json(perfloop(home, "sessions", "--json"))
    assert [x["id"] for x in listed] == [s["session"]]
    # said up front: a guess at first; the next demo with the same flags, from this one's time,
    # within +-30% of what it then takes (issue 63: "179 s" said, 318 s taken, nothing up front)
    assert "expected: about 5 min (a guess: no demo with these flags timed on this host yet)" in proc.stderr
    again = perfloop(home, "demo", "--server-args=--layers 1", env={"PERFLOOP_PROGRESS": "off"})
    assert again.returncode == 0, again.stderr[-2000:]
    assert (
        "expected: about " in again.stderr and "the median of 1 earlier demo(s) on this host" in again.stderr
    )
    took = re.search(r"the demo took ([^(]+) \(expected ([^)]+)\)", again.stderr)
    assert took, again.stderr[-2000:]
    actual, announced = seconds_of(took[1]), seconds_of(took[2])
    print(f"perfloop demo at one layer: announced {announced:.0f} s, took {actual:.0f} s")
    assert abs(announced / actual - 1) <= 0.3, (announced, actual)


def test_dirty_tree_keeps_user_changes_in_instrumented_and_patched_files(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    """The user's staged and unstaged work in the instrumented and the patched file survives."""
    runner, backend = repo / RUNNER, repo / BACKEND
    (repo / "NOTES.md").write_text("my notes\n")  # untracked
    runner.write_text("# user: staged tweak\n" + runner.read_text())
    git(repo, "add", RUNNER)
    runner.write_text(runner.read_text() + "\n# user: unstaged tweak\n")
    backend.write_text(backend.read_text() + "\n# user: unstaged tweak\n")
    before = {p: (repo / p).read_text() for p in (RUNNER, BACKEND, "NOTES.md")}
    staged = git(repo, "diff", "--cached")

    proc = perfloop(
        home, "run", "--approve", "auto", str(write_target(tmp_path / "t.toml", repo, looks=1)), "--json"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    assert s["accepted"] == ["kv-cache-full-pool-cast"] and s["profile_method"] == "patch"
    assert s["server_launches"] == 2
    assert_clean(repo, s)
    # The commit holds the playbook patch only; the user's work is still uncommitted, intact.
    committed = git(repo, "show", "HEAD", "--format=")
    assert "user:" not in committed and "Gather-then-cast" in committed
    assert (repo / RUNNER).read_text() == before[RUNNER]
    assert (repo / "NOTES.md").read_text() == before["NOTES.md"]
    assert "# user: unstaged tweak" in backend.read_text()
    assert "Gather-then-cast" in backend.read_text()
    assert git(repo, "diff", "--cached") == staged
    status = git(repo, "status", "--porcelain").splitlines()
    assert sorted(status) == sorted([f"MM {RUNNER}", f" M {BACKEND}", "?? NOTES.md"])


def test_bad_patches_are_refused_rolled_back_then_the_good_one_lands(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    """A patch that does not apply, one that crashes the server, one that changes outputs."""
    books = tmp_path / "books"
    fix = [
        (
            "k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)",
            "k_buffer = self.kv_pool.get_key_buffer(layer_id)",
        ),
        ("k_buffer[kv_indices], causal=False)", "k_buffer[kv_indices].to(q.dtype), causal=False)"),
    ]
    playbook_variant(
        books,
        "bad-does-not-apply",
        1.0,
        edited_diff(repo, tmp_path, {BACKEND: fix}).replace("real = len", "real = LEN"),
    )
    playbook_variant(
        books,
        "bad-crashes-server",
        0.99,
        edited_diff(
            repo,
            tmp_path,
            {
                BACKEND: [
                    *fix,
                    ("import torch\n", "import torch\n\nraise RuntimeError('patched backend is broken')\n"),
                ]
            },
        ),
    )
    playbook_variant(
        books,
        "bad-changes-outputs",
        0.98,
        edited_diff(repo, tmp_path, {BACKEND: [*fix, ("* self.scaling", "* self.scaling * 3.0")]}),
    )

    proc = perfloop(
        home,
        "run",
        "--approve",
        "auto",
        str(write_target(tmp_path / "t.toml", repo, looks=1)),
        "--json",
        "--playbooks",
        str(books),
        "--max-iterations",
        "1",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    verdicts = {d["playbook"]: (d["verdict"], d["reason"]) for d in shown["decisions"]}
    assert verdicts["bad-does-not-apply"][0] == "failed"
    assert "does not apply" in verdicts["bad-does-not-apply"][1]
    assert verdicts["bad-crashes-server"][0] == "failed"
    assert "patched backend is broken" in verdicts["bad-crashes-server"][1]
    assert verdicts["bad-changes-outputs"][0] == "rejected"
    assert "outputs changed" in verdicts["bad-changes-outputs"][1]
    assert verdicts["kv-cache-full-pool-cast"][0] == "accepted"
    assert s["accepted"] == ["kv-cache-full-pool-cast"] and s["outputs_identical"] is True
    # Exactly one commit on the branch: the rolled-back candidates left nothing behind. The
    # checkout is given back on main, as it was found; the fix stays on the session branch.
    assert s["checkout"] == "main" and git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(repo, "rev-list", "--count", f"main..{s['branch']}").strip() == "1"
    assert "Gather-then-cast" in git(repo, "show", f"{s['branch']}:{BACKEND}")
    assert "Gather-then-cast" not in (repo / BACKEND).read_text()
    assert git(repo, "status", "--porcelain") == ""
    assert_clean(repo, s)


def test_a_hanging_patch_is_rolled_back_then_abort_cleans_up_what_is_live(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    """One session, two bad candidates. The first hangs the server at start-up: the launch times out,
    the hung server is stopped and the patch rolled back. The second starts healthy but fails every
    request, an unexpected tool error in `measure` while the candidate's server runs, its commit is
    undecided and the dormant profiler is back in: `abort` stops the server, reverts the commit,
    removes the instrumentation, leaves the empty session branch and marks the session failed."""
    books = tmp_path / "books"
    original = (repo / BACKEND).read_text()
    hang = [("import torch\n", "import time\n\nimport torch\n\ntime.sleep(3600)  # hangs at start-up\n")]
    playbook_variant(books, "bad-hangs-server", 1.0, edited_diff(repo, tmp_path, {BACKEND: hang}))
    doc = '''        """Prefill one request: store the prompt's KV rows, then causal attention over them."""\n'''
    fail = [(doc, doc + '        raise RuntimeError("patched prefill is broken")\n')]
    playbook_variant(books, "bad-fails-requests", 0.99, edited_diff(repo, tmp_path, {BACKEND: fail}))
    # 20 s, the hung launch's wait: 6x the healthy launches' start-up (2.2-3.3 s here at one layer)
    target = write_target(tmp_path / "t.toml", repo, startup_timeout_s=20, looks=1)

    proc = perfloop(home, "run", "--approve", "auto", str(target), "--json", "--playbooks", str(books))
    assert proc.returncode == 1, proc.stderr[-2000:]
    s = last_json(proc)
    assert s["status"] == "failed" and s["server_launches"] == 3
    assert s["stop_reason"] == "aborted: measure: prompt 0: the server streamed no tokens", s
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    (hung,) = shown["decisions"]
    assert (hung["playbook"], hung["verdict"]) == ("bad-hangs-server", "failed")
    assert "server did not become healthy within 20s and was stopped" in hung["reason"]
    assert [t["node"] for t in shown["transitions"]][-10:] == [
        "apply",
        "relaunch",
        "rollback",
        "propose",
        "approve",
        "cleanup",
        "apply",
        "relaunch",
        "measure",
        "abort",
    ]
    calls = SessionStore(home / "sessions.sqlite").tool_calls(s["session"])
    (failed,) = [c for c in calls if c.node == "measure"]
    assert failed.error == "ServerError: prompt 0: the server streamed no tokens"  # it answered: alive
    assert [(c.name, c.error) for c in calls if c.node == "abort"] == [
        ("server.stop", None),
        ("server.stop_recorded", None),
        ("repo.revert_commit", None),
        ("repo.remove_instrumentation", None),
        ("repo.give_back", None),  # back on the branch it was found on, the empty branch deleted
    ]
    stopped = next(c for c in calls if c.node == "abort")
    assert stopped.input["server"]["launch_number"] == 3  # the candidate's server
    assert_clean(repo, "main")  # no server left, no instrumentation
    assert git(repo, "branch", "--list", "perfloop/*") == ""
    assert (repo / BACKEND).read_text() == original and git(repo, "status", "--porcelain") == ""


RANK_DELAY_S = 8.0
"""Longer than the profiling request goes on after rank 0's trace is written (a few tokens)."""


def second_rank(home: Path) -> threading.Thread:
    """Plays TP rank 1 of a two-rank server (the demo server writes rank 0 only; no GPUs here):
    RANK_DELAY_S after rank 0's trace appears, rank 1's is written beside it, atomically."""

    def run() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            found = list(home.glob("sessions/*/profiles/*/*/*-TP-0.trace.json.gz"))
            if found:
                time.sleep(RANK_DELAY_S)
                dst = found[0].with_name(found[0].name.replace("-TP-0.", "-TP-1."))
                shutil.copyfile(found[0], dst.with_name(f".{dst.name}.partial"))
                os.replace(dst.with_name(f".{dst.name}.partial"), dst)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def assert_refused_by_lock(proc: subprocess.CompletedProcess, sid: str, holder: int) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip() == (
        f"error: session {sid} is already being run by perfloop process {holder} on {socket.gethostname()}; "
        "wait for it to finish (or end that process)"
    )


def test_manual_approval_pauses_then_approve_and_reject_resume(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    """`--approve manual` stops with the diff and evidence; approve/reject continue from a new process.

    The approved run profiles through the server's /start_profile (`api`) on a two-rank target and
    waits for both ranks' traces (rank 1's comes RANK_DELAY_S after rank 0's); the rejected one
    profiles by patch. While another process holds a session's lock (this test, through
    `Sessions.lock`), approve, reject and fork are refused with nothing recorded; both sessions then
    replay from their recordings.
    """
    target = write_target(tmp_path / "t.toml", repo, "api", tp_size=2, looks=1)
    rank1 = second_rank(home)
    paused = perfloop(home, "run", str(target), "--approve", "manual", "--json", "--max-iterations", "1")
    assert paused.returncode == 0, paused.stderr[-2000:]
    rank1.join(timeout=5)
    p = last_json(paused)
    sid = p["session"]
    assert p["status"] == "paused"
    assert (
        "waits for approval" in paused.stderr and "get_key_buffer" in paused.stderr
    )  # --json: the view on stderr
    assert "expected gain" in paused.stderr and BACKEND in paused.stderr
    assert "servers are stopped while it waits" in paused.stderr  # the approval view says so
    assert processes_in(repo) == [] and processes_in(home) == []  # nothing held while a human reads
    store = SessionStore(home / "sessions.sqlite")
    (take,) = [c for c in store.tool_calls(sid) if c.name == "profile.take"]
    assert take.output is not None
    folder = Path(take.output["trace_path"])  # both ranks: the folder, not rank 0's file
    ranks = sorted(folder.glob("*-TP-*.trace.json.gz"))
    assert take.output is not None
    assert [f.name.split("-TP-")[1] for f in ranks] == ["0.trace.json.gz", "1.trace.json.gz"]
    ended = take.started_at.timestamp() + take.duration_s
    assert ended >= ranks[1].stat().st_mtime  # it returned only once rank 1's trace was there
    (read,) = [c for c in store.tool_calls(sid) if c.name == "profile.read"]
    assert read.output is not None
    assert read.input["path"] == str(folder) and len(read.output["ranks"]) == 2  # merged
    again = perfloop(home, "resume", sid)
    assert read.output is not None
    assert again.returncode == 2 and "waits for approval" in again.stderr

    with Sessions(home).lock(sid):  # another process holds the session
        assert_refused_by_lock(perfloop(home, "approve", sid), sid, os.getpid())
        assert_refused_by_lock(perfloop(home, "reject", sid, "--reason", "x"), sid, os.getpid())
    assert store.inputs(sid, "answer") == []
    assert last_json(perfloop(home, "sessions", "--json"))[0]["status"] == "paused"
    done = perfloop(home, "approve", sid, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    s = last_json(done)
    assert s["status"] == "done"  # its subject is the approval, not the verdict (CI-D drifted once)
    if kept_unless_drifted(s["accepted"] == ["kv-cache-full-pool-cast"], s["decision"]):
        assert s["rejected"] == []
    else:
        assert s["rejected"] == ["kv-cache-full-pool-cast"]
    assert s["profile_method"] == "api" and s["server_launches"] == 2  # the baseline, the candidate
    assert store.inputs(sid, "answer") == [{"approved": True, "by": "human"}]
    assert_clean(repo, s)
    twice = perfloop(home, "approve", sid)
    assert twice.returncode == 2 and "not waiting for approval" in twice.stderr
    with Sessions(home).lock(sid):
        assert_refused_by_lock(perfloop(home, "fork", sid, "--at", "propose"), sid, os.getpid())
    assert len(last_json(perfloop(home, "sessions", "--json"))) == 1  # no fork was made
    replayed = perfloop(home, "replay", sid, "--json")
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True, replayed.stderr

    repo2 = make_repo(tmp_path / "engine2")
    target2 = write_target(tmp_path / "t2.toml", repo2, looks=1)
    paused2 = last_json(
        perfloop(home, "run", str(target2), "--approve", "manual", "--keep-servers-when-paused", "--json")
    )
    assert len(processes_in(repo2)) == 1  # the baseline server, kept for quick interactive work
    rejected = perfloop(home, "reject", paused2["session"], "--reason", "not this week", "--json")
    assert rejected.returncode == 0, rejected.stderr[-2000:]
    r = last_json(rejected)
    assert r["status"] == "done" and r["accepted"] == [] and r["rejected"] == ["kv-cache-full-pool-cast"]
    shown = last_json(perfloop(home, "show", r["session"], "--json"))
    assert "not this week" in shown["decisions"][0]["reason"]
    assert git(repo2, "rev-list", "--count", "main..HEAD").strip() == "0"
    assert git(repo2, "status", "--porcelain") == ""
    assert processes_in(repo2) == []
    replayed = perfloop(home, "replay", r["session"], "--json")
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True, replayed.stderr


def test_bad_cli_input_is_one_line_and_changes_nothing(tmp_path: Path, home: Path, repo: Path) -> None:
    """Unknown session, bad option values, a config that is not a git repo top level."""
    cases = [
        (("show", "nope"), "no session 'nope'"),
        (("demo", "--approve", "sometimes"), "--approve must be one of auto, manual"),
        (("run", str(tmp_path / "missing.toml")), "cannot read target config"),
        (
            ("run", str(write_target(tmp_path / "sub.toml", repo / "mla_server"))),
            f'is a subfolder of the git checkout at {repo}: set `repo = "{repo}"`',
        ),
    ]
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nrepo = "."\n[launch]\nargv = "not a list"\n')
    cases.append((("run", str(bad)), "field `launch.argv`"))
    for args, expected in cases:
        proc = perfloop(home, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert expected in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    assert git(repo, "status", "--porcelain") == ""
