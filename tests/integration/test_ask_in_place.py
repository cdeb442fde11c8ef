"""On a terminal, approval is a prompt: `perfloop run` of a user's own target (no --approve: manual,
everywhere) shows the proposal and asks in place (approve, reject, edit, later) instead of
exiting and waiting for a second command; without a terminal it pauses as `--approve manual` does. In a real
terminal (tmux), the proposal is rejected at the prompt with a reason, and the session goes on."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import PERFLOOP, make_repo, perfloop, write_target
from tests.integration.test_hostile_patch import Tmux, tmux  # noqa: F401 (the fixture)
from tests.procs import processes_in

PROMPT = "approve, reject, edit the patch, or later? [a/r/e/l]"


def wait_for(t: Tmux, text: str, timeout_s: float = 400) -> str:
    end = time.monotonic() + timeout_s
    pane = ""
    while time.monotonic() < end:
        pane = t._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")
        if text in pane:
            return pane
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not shown in {timeout_s} s:\n{pane[-3000:]}")


@pytest.mark.e2e
def test_run_on_a_terminal_asks_in_place_and_a_rejection_there_continues_the_session(
    tmp_path: Path,
    tmux: Tmux,  # noqa: F811
) -> None:
    home, repo = tmp_path / "home", make_repo(tmp_path / "engine")
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    tmux._tmux(
        "send-keys", "-t", "t", f"{PERFLOOP} run {target} --max-iterations 1; echo __EN''DED__", "Enter"
    )
    pane = wait_for(tmux, PROMPT)
    assert "waits for approval" in pane and "diff --git" in pane, pane[-3000:]  # the diff, then the question
    tmux._tmux("send-keys", "-t", "t", "r", "Enter")
    wait_for(tmux, "why (recorded)", 30)
    tmux._tmux("send-keys", "-t", "t", "not this one", "Enter")
    end = time.monotonic() + 400
    while "__ENDED__\n" not in (pane := tmux._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")):
        if pane.count(PROMPT) >= 2:  # the next proposal, asked in place too: later
            tmux._tmux("send-keys", "-t", "t", "l", "Enter")
            wait_for(tmux, "__ENDED__\n", 60)
            break
        assert time.monotonic() < end, pane[-3000:]
        time.sleep(0.5)
    # no spinner frame left on the terminal before the question or the summary's title
    spinner = set("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
    lines = pane.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(PROMPT[:20]) or "perfloop session " in line:
            assert not spinner & set(line + (lines[i - 1] if i else "")), "\n".join(
                lines[max(0, i - 2) : i + 1]
            )
    shown = json.loads(perfloop(home, "show", "last", "--json").stdout)
    first = shown["decisions"][0]
    assert first["verdict"] == "rejected" and "not this one" in first["reason"], first
    assert shown["session"]["status"] in ("done", "paused"), shown["session"]["status"]
    for pid in processes_in(tmp_path):  # a paused session's servers
        os.kill(pid, 9)


@pytest.mark.e2e
def test_run_without_a_terminal_and_without_approve_pauses_at_the_first_proposal(tmp_path: Path) -> None:
    """A user's own target is manual unless `--approve auto` is chosen: with no terminal (stdin
    /dev/null, stdout a pipe) nothing is applied; the session pauses as `--approve manual` does."""
    home, repo = tmp_path / "home", make_repo(tmp_path / "engine")
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    run = perfloop(home, "run", str(target), "--json", "--max-iterations", "1")
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout)
    assert summary["status"] == "paused", summary
    shown = json.loads(perfloop(home, "show", "last", "--json").stdout)
    assert shown["session"]["status"] == "paused" and not shown["decisions"], shown["decisions"]
    assert "waits for approval" in run.stderr + run.stdout, run.stderr[-2000:]
    for pid in processes_in(tmp_path):  # the paused session's servers
        os.kill(pid, 9)
    assert (
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout == head
    )
