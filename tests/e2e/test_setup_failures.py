"""Set-up failures are bad input: one line on stderr, exit 2, before anything launches, and the
user's repository exactly as before (no branch, no instrumentation, no stray file)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import BUILTIN_PLAYBOOK, DEMO, git, make_repo, perfloop, write_target
from tests.procs import processes_in

pytestmark = pytest.mark.e2e


def repo_state(repo: Path) -> tuple:
    """Everything of the repository a failed set-up must leave as it was."""
    files = {
        str(p.relative_to(repo)): p.read_bytes() if p.is_file() else None
        for p in sorted(repo.rglob("*"))
        if ".git" not in p.relative_to(repo).parts
    }
    refs = subprocess.run(["git", "-C", str(repo), "for-each-ref"], capture_output=True, text=True).stdout
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--ignored"], capture_output=True, text=True
    )
    head = (repo / ".git" / "HEAD").read_text()
    return files, refs, status.stdout, head


def fresh_repo(dest: Path) -> Path:
    """The demo source in a `git init`ed folder with no commit yet."""
    shutil.copytree(DEMO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    git(dest, "init", "-q", "-b", "main")
    return dest


def broken_books(root: Path) -> dict[str, Path]:
    bad_toml = root / "bad-toml"
    (bad_toml / "x").mkdir(parents=True)
    (bad_toml / "x" / "playbook.toml").write_text("id = [unclosed\n")
    missing_patch = root / "missing-patch"
    (missing_patch / "kv-copy").mkdir(parents=True)
    text = BUILTIN_PLAYBOOK.read_text().replace('id = "kv-cache-full-pool-cast"', 'id = "kv-copy"')
    (missing_patch / "kv-copy" / "playbook.toml").write_text(text)
    not_a_diff = root / "not-a-diff"
    shutil.copytree(missing_patch, not_a_diff)
    (not_a_diff / "kv-copy" / "patches").mkdir()
    (not_a_diff / "kv-copy" / "patches" / "mla_server.diff").write_text("rm -rf ~\n")
    return {
        "missing": root / "nope",
        "bad-toml": bad_toml,
        "missing-patch": missing_patch,
        "not-a-diff": not_a_diff,
    }


def test_set_up_failures_are_one_line_exit_2_and_leave_the_repo_as_it_was(scratch, tmp_path: Path) -> None:
    repo = make_repo(scratch.root / "engine")
    empty = fresh_repo(scratch.root / "empty")
    scratch.allow(repo, empty)
    target = write_target(scratch.inputs / "t.toml", repo)
    scratch.allow(target)
    books = broken_books(tmp_path / "books")
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    busy = holder.getsockname()[1]

    def variant(name: str, old: str, new: str, repo_path: Path = repo) -> Path:
        text = write_target(tmp_path / "base.toml", repo_path).read_text()
        assert old in text
        out = tmp_path / f"{name}.toml"
        out.write_text(text.replace(old, new))
        return out

    cases = [
        (("run", str(write_target(tmp_path / "empty.toml", empty))), "has no commit yet"),
        (
            ("run", str(variant("nocmd", '"bash", "launch.sh"', '"no-such-server-xyz", "launch.sh"'))),
            "not found on PATH",
        ),
        (
            ("run", str(variant("noscript", '"bash", "launch.sh"', '"bash", "missing.sh"'))),
            "script missing.sh not found",
        ),
        (
            (
                "run",
                str(variant("port", "startup_timeout_s = 120", f"port = {busy}\nstartup_timeout_s = 120")),
            ),
            f"launch.port {busy} is already in use",
        ),
        (("demo", "--playbooks", str(books["missing"])), "does not exist"),
    ]
    for name, expected in (
        ("bad-toml", "invalid TOML"),
        ("missing-patch", "cannot be read"),
        ("not-a-diff", "no file header"),
    ):
        cases.append((("run", str(target), "--playbooks", str(books[name])), expected))
    before = {r: repo_state(r) for r in (repo, empty)}
    try:
        for args, expected in cases:
            proc = perfloop(scratch.home, *args, timeout=60)
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            assert expected in proc.stderr, (args, proc.stderr)
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
            assert {r: repo_state(r) for r in (repo, empty)} == before, args
            assert processes_in(repo) == [] and processes_in(empty) == []
    finally:
        holder.close()
    assert not (scratch.home / "workspaces").exists()  # the demo made no repo


def one_line_exit_2(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """A first launch's failure ends as bad input does: exit 2, one line on stderr (progress off)
    naming what failed and what to do, no table; the error line."""
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    lines = [
        ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("expected: ")
    ]  # a demo's estimate
    assert len(lines) == 1 and lines[0].startswith("error: the server failed at its first launch: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


QUIET = {"PERFLOOP_PROGRESS": "off"}
"""No progress lines on stderr, so that it holds the error alone."""


def test_a_server_that_exits_at_its_first_launch_is_one_line_exit_2_and_leaves_the_repo_as_found(
    scratch,
) -> None:
    """Not checkable beforehand: the session ends at once (one line, exit 2, the summary still the
    one `--json` document), its repo given back on its branch, the empty session branch deleted,
    the instrumentation removed, the user's edit kept, no process left."""
    repo = make_repo(scratch.root / "engine")
    scratch.allow(repo)
    runner = repo / "mla_server" / "model_runner.py"
    runner.write_text(runner.read_text() + "\n# user: unstaged note\n")
    before = repo_state(repo)
    text = write_target(scratch.inputs / "base.toml", repo).read_text()
    scratch.allow(scratch.inputs / "base.toml")
    target = scratch.write(
        "t.toml",
        text.replace(
            'argv = ["bash", "launch.sh",', 'argv = ["bash", "-c", "echo no GPU here; exit 3", "x",'
        ),
    )
    proc = perfloop(scratch.home, "run", "--approve", "auto", str(target), "--json", env=QUIET)
    line = one_line_exit_2(proc, "server exited with code 3 during start-up", ": no GPU here;", "run again")
    summary = json.loads(proc.stdout)  # one document, nothing else on stdout
    # the launch that failed counts (issue 57: every launch made is counted, across attempts)
    assert (summary["status"], summary["server_launches"], summary["tpot_ms_before"]) == ("failed", 1, None)
    assert summary["session"] in line
    assert repo_state(repo) == before
    assert processes_in(repo) == []


def test_a_demo_whose_server_exits_at_launch_leaves_no_workspace(scratch) -> None:
    """`perfloop demo --server-args` with a flag the demo server refuses: it exits at once; the one
    line names the flag, and the workspace the demo copied is gone with its server."""
    proc = perfloop(scratch.home, "demo", "--server-args=--no-such-flag", env=QUIET, timeout=120)
    one_line_exit_2(proc, "--no-such-flag", "run again")
    assert not (scratch.home / "workspaces").exists()
    assert processes_in(scratch.home) == []


def test_a_port_taken_before_a_resumed_first_launch_is_one_line_naming_the_port(scratch) -> None:
    """The port check runs before a session starts; a session interrupted at its first launch
    (SIGTERM) and resumed once another process holds its fixed port meets it at the launch: one
    line naming the port and its holder, exit 2, the repo as found."""
    repo = make_repo(scratch.root / "engine")
    scratch.allow(repo)
    before = repo_state(repo)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    text = write_target(scratch.inputs / "base.toml", repo).read_text()
    scratch.allow(scratch.inputs / "base.toml")
    target = scratch.write(
        "t.toml", text.replace("startup_timeout_s = 120", f"port = {port}\nstartup_timeout_s = 120")
    )
    faults = scratch.write("faults", "server:spawned TERM\n")
    first = perfloop(
        scratch.home, "run", "--approve", "auto", str(target), env={"PERFLOOP_FAULTS_FILE": str(faults)}
    )
    assert first.returncode == 143 and "continue with `perfloop resume " in first.stderr, first.stderr[-2000:]
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        resumed = perfloop(scratch.home, "resume", "last", env=QUIET)
        one_line_exit_2(
            resumed, "Address already in use", f"launch.port {port} is in use by process {os.getpid()}"
        )
    finally:
        holder.close()
    assert repo_state(repo) == before
    assert processes_in(repo) == []
