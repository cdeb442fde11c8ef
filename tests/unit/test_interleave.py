"""Interleaved arms: the launch noise of A/A pairs, the request order, the reference copy (real git)."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from agent.decision.arms.interleave import confirming_line
from agent.decision.stats.noise import noise_for, pair_noise
from agent.decision.stats.rule import needs_confirmation, replicated
from state.engines.workspace import ReferenceCopyArgs, RemoveCopyArgs
from state.measurement.aa import AASample
from state.measurement.decision import DecisionConfig, Look
from tools.client.stats import pair_order
from tools.errors import PatchError
from tools.workspace.reference import reference_copy, remove_reference_copy

CFG = DecisionConfig(arms="interleaved")


def pair(shift: float, i: int = 0) -> AASample:
    return AASample(
        target_key="t", group="g", session_id=f"s{i}", launch_number=1, location_log=1.0, requests=18,
        shift_log=shift,
    )  # fmt: skip


def single(location: float, i: int = 0) -> AASample:
    return AASample(
        target_key="t", group="g", session_id=f"s{i}", launch_number=1, location_log=location, requests=9
    )


def test_pair_noise_is_the_default_until_enough_pairs_unless_they_say_worse() -> None:
    assert pair_noise([], CFG).sigma_log == CFG.default_pair_noise
    assert pair_noise([], CFG).paired and pair_noise([], CFG).source == "default"
    few = pair_noise([pair(0.01)], CFG)
    assert few.source == "default" and few.sigma_log == CFG.default_pair_noise
    wild = pair_noise([pair(0.5)], CFG)  # one pair already 1.6x apart: the default is not kept
    assert wild.source == "default" and wild.sigma_log == pytest.approx(0.5 / math.sqrt(2))


def test_pair_noise_from_enough_pairs_is_an_upper_bound_of_the_estimate() -> None:
    rng = np.random.default_rng(3)
    sigma = 0.03  # per launch: a pair's shift has SD sigma * sqrt(2)
    shifts = rng.normal(0.0, sigma * math.sqrt(2), 40)
    noise = pair_noise([pair(float(s), i) for i, s in enumerate(shifts)], CFG)
    assert noise.source == "aa" and noise.launches == 40
    assert noise.estimate_log is not None and abs(noise.estimate_log - sigma) < 0.01
    assert noise.sigma_log > noise.estimate_log  # the rule uses the upper bound
    assert "interleaved A/A pairs" in noise.describe()


def test_each_arm_uses_only_its_own_kind_of_a_a_sample() -> None:
    pairs = [pair(0.4, i) for i in range(5)]  # wild pairs must not move the sequential noise
    singles = [single(1.0 + 0.001 * i, i) for i in range(8)]
    sequential = noise_for(pairs + singles, DecisionConfig())
    assert sequential.source == "aa" and sequential.sigma_log < 0.01 and not sequential.paired
    interleaved = noise_for(pairs + singles, CFG)
    assert interleaved.paired and interleaved.launches == 5 and interleaved.sigma_log > 0.28


def test_request_order_alternates_so_neither_arm_always_goes_first() -> None:
    firsts = [pair_order(rep, i)[0] for rep in range(4) for i in range(3)]
    assert firsts.count(0) == firsts.count(1) == 6
    assert all(sorted(pair_order(r, i)) == [0, 1] for r in range(3) for i in range(3))
    assert pair_order(0, 0) != pair_order(1, 0) and pair_order(0, 0) != pair_order(0, 1)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def patched_repo(tmp_path: Path) -> tuple[Path, str]:
    """A repo whose HEAD is a candidate commit (a.py changed), with uncommitted changes on top: the
    instrumented file hook.py, a new untracked file, and an extra line in the patched a.py."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.py").write_text("x = 1\ny = 2\nz = 3\n")
    (repo / "hook.py").write_text("def step():\n    pass\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    parent = git(repo, "rev-parse", "HEAD").strip()
    (repo / "a.py").write_text("x = 1\ny = 20\nz = 3\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "candidate")
    (repo / "hook.py").write_text("def step():\n    profile()\n    pass\n")
    (repo / "extra.py").write_text("EXTRA = 1\n")
    (repo / "a.py").write_text("x = 1\ny = 20\nz = 3\nw = 4\n")
    return repo, parent


def test_reference_copy_is_the_parent_with_the_uncommitted_state(patched_repo, tmp_path: Path) -> None:
    repo, parent = patched_repo
    dest = tmp_path / "session" / "reference"
    before = git(repo, "status", "--porcelain")
    snap = reference_copy(ReferenceCopyArgs(repo=repo, dest=dest, commit=parent))
    assert snap.head_sha == parent
    assert (dest / "a.py").read_text() == "x = 1\ny = 2\nz = 3\nw = 4\n"  # the patch out, the extra line in
    assert (dest / "hook.py").read_text() == (repo / "hook.py").read_text()
    assert (dest / "extra.py").read_text() == "EXTRA = 1\n"
    assert git(repo, "status", "--porcelain") == before  # the user's checkout is untouched
    again = reference_copy(ReferenceCopyArgs(repo=repo, dest=dest, commit=parent))  # a retried attempt
    assert again.dirty_sha256 == snap.dirty_sha256
    remove_reference_copy(RemoveCopyArgs(repo=repo, dest=dest))
    assert not dest.exists() and str(dest) not in git(repo, "worktree", "list")
    remove_reference_copy(RemoveCopyArgs(repo=repo, dest=dest))  # twice: a no-op
    assert git(repo, "status", "--porcelain") == before


def test_a_reference_copy_that_cannot_carry_the_tree_is_refused_whole(patched_repo, tmp_path: Path) -> None:
    repo, parent = patched_repo
    (repo / "a.py").write_text("x = 1\ny = 21\nz = 3\n")  # uncommitted edit of the patched line itself
    dest = tmp_path / "reference"
    with pytest.raises(
        PatchError, match=r"cannot carry the uncommitted change of a\.py.*arms = \"sequential\""
    ):
        reference_copy(ReferenceCopyArgs(repo=repo, dest=dest, commit=parent))
    assert not dest.exists() and str(dest) not in git(repo, "worktree", "list")


def a_look(verdict: str, ci_low: float) -> Look:
    return Look(
        look=1, of=3, speedup=ci_low * 1.2, ci_low=ci_low, ci_high=ci_low * 1.5, level=0.98, prompts=3,
        requests_reference=3, requests_candidate=3, verdict=verdict,
    )  # fmt: skip


def test_a_confirming_pair_says_why_it_launches() -> None:
    """The progress line and the measure step's note before a second pair of launches."""
    lk = a_look("accepted", 1.1).model_copy(update={"speedup": 1.43, "ci_high": 1.9})
    assert confirming_line(lk, 2.0) == (
        "confirming 1.43x [1.10, 1.90] on a fresh pair: its low end is under confirm_below 2.0"
    )


def test_an_acceptance_below_confirm_below_needs_a_second_pair_that_accepts_too() -> None:
    assert needs_confirmation(a_look("accepted", 1.2), CFG)
    assert not needs_confirmation(a_look("accepted", 7.5), CFG)  # far beyond any launch effect seen
    assert not needs_confirmation(a_look("inconclusive", 1.2), CFG)
    assert not needs_confirmation(
        a_look("accepted", 1.2), DecisionConfig(arms="interleaved", confirm_below=None)
    )
    assert replicated("accepted", "accepted") == "accepted"
    assert replicated("accepted", "inconclusive") == "inconclusive"
    assert replicated("accepted", "rejected") == "inconclusive"
    assert replicated("accepted", "regression") == "regression"
