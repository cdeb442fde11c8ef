"""The output gate's policies on the CPU demo target, with real servers: the real cast fix plus a
small change of the logits (as a fused kernel or a reordered reduction changes numerics) flips
greedy tokens on the correctness set.

- `[correctness] policy = "exact"` (the default): rejected on the gate, never timed;
- `policy = "tolerance"` with thresholds it meets: accepted (the fix's speed-up), the gate's
  agreement and logprob difference stored with the decision and printed; the same fix with a
  perturbation ten times larger, in the same session: rejected by the thresholds (with either
  arms: the timing outputs of the two arms differ then too).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import (
    confirming_launches,
    edited_diff,
    git,
    last_json,
    perfloop,
    playbook_variant,
    write_target,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

BACKEND = "mla_server/attention/mla_backend.py"
MODEL = "mla_server/model.py"
CAST = "k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)"
FIX = [(CAST, "k_buffer = self.kv_pool.get_key_buffer(layer_id)"),
       ("k_buffer[kv_indices], causal=False)", "k_buffer[kv_indices].to(q.dtype), causal=False)")]  # fmt: skip
LOGITS = "        return F.linear(rms_norm(h, self.final_norm), self.lm_head).float()\n"


def nudged(eps: float) -> list[tuple[str, str]]:
    """Every logit moved by at most `eps` (a fixed pattern over the vocabulary): logprobs move by
    at most 2 eps, and near-ties flip. `benchmarks/tolerance_nudge.py` over 20 correctness sets of
    this shape: eps 0.1 refused by the exact gate on 20/20, top-1 agreement 85.4-95.8%, max diff
    0.098-0.119; eps 1 agreement 52.1-77.1%, max diff 1.200-1.407."""
    return [
        (
            LOGITS,
            "        logits = F.linear(rms_norm(h, self.final_norm), self.lm_head).float()\n"
            f"        return logits + {eps} * torch.cos(torch.arange(logits.shape[-1], device=logits.device) * 1.7)\n",
        )
    ]


def target(tmp_path: Path, repo: Path, policy: str, arms: str) -> Path:
    path = write_target(tmp_path / "t.toml", repo, looks=1, arms=arms)
    path.write_text(path.read_text().replace("[correctness]\n", f"[correctness]\n{policy}"))
    return path


def run(tmp_path: Path, home: Path, repo: Path, books: Path, toml: Path) -> tuple[dict, dict, str]:
    proc = perfloop(home, "run", "--approve", "auto", str(toml), "--json", "--playbooks", str(books), "--no-builtin-playbooks",
                    "--max-iterations", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    printed = perfloop(home, "show", s["session"])
    assert printed.returncode == 0, printed.stderr
    return s, {d["playbook"]: d for d in shown["decisions"]}, printed.stdout


def test_a_numerics_change_is_rejected_by_the_default_exact_gate(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    books = tmp_path / "books"
    playbook_variant(
        books, "fix-nudged", 0.99, edited_diff(repo, tmp_path, {BACKEND: FIX, MODEL: nudged(0.1)})
    )
    toml = target(tmp_path, repo, "", "interleaved")  # the gate runs before the reference's launch
    s, by, _ = run(tmp_path, home, repo, books, toml)
    d = by["fix-nudged"]
    assert s["accepted"] == [] and d["verdict"] == "rejected", d["reason"]
    assert d["reason"].startswith("outputs changed on the correctness set"), d["reason"]
    assert d["judgement"] is None and d["tolerance"] is None
    assert s["server_launches"] == 2 and s["output_gate"].startswith("exact alone; "), s["output_gate"]
    assert s["output_gate"].endswith(f"fix-nudged: {d['reason']}"), s["output_gate"]
    assert git(repo, "rev-list", "--count", "main..HEAD").strip() == "0"


@pytest.mark.parametrize("arms", ["sequential", "interleaved"])
def test_tolerance_accepts_within_its_thresholds_and_rejects_beyond(
    tmp_path: Path, home: Path, repo: Path, arms: str
) -> None:
    books = tmp_path / "books"
    diff = edited_diff(repo, tmp_path, {BACKEND: FIX, MODEL: nudged(1.0)})
    playbook_variant(books, "fix-shaken", 0.99, diff)
    playbook_variant(
        books, "fix-nudged", 0.98, edited_diff(repo, tmp_path, {BACKEND: FIX, MODEL: nudged(0.1)})
    )
    policy = 'policy = "tolerance"\nmin_top1_agreement = 0.7\nmax_logprob_diff = 0.25\n'
    s, by, printed = run(tmp_path, home, repo, books, target(tmp_path, repo, policy, arms))
    shaken, ok = by["fix-shaken"], by["fix-nudged"]
    assert shaken["verdict"] == "rejected" and shaken["judgement"] is None, shaken["reason"]
    t = shaken["tolerance"]
    assert t["min_top1_agreement"] == 0.7 and t["max_logprob_diff_allowed"] == 0.25
    assert t["positions"] == t["decoded_positions"] == 3 * 16 and t["prompts"] == 3  # 2 timing + 1 random
    assert t["max_logprob_diff"] > 0.25 and not t["top1_agreement"] >= ok["tolerance"]["top1_agreement"], t
    assert shaken["reason"].startswith("tolerance gate: top-1 agreement") and "-> failed" in shaken["reason"]

    assert ok["verdict"] == "accepted", ok["reason"]
    t = ok["tolerance"]
    assert t["top1_agreement"] >= 0.7 and 0 < t["max_logprob_diff"] <= 0.2 + 1e-6, t  # at most 2 eps
    assert "-> passed" in ok["reason"] and "outputs identical" not in ok["reason"]
    assert ok["outputs_identical"] is False  # greedy text did change: the exact gate would refuse it
    assert s["accepted"] == ["fix-nudged"] and s["speedup"] > 2, s
    # baseline, two candidates and, interleaved, the reference beside the one that passed the gate
    # (and a confirming pair when its CI started below confirm_below)
    extra = 1 + confirming_launches([ok]) if arms == "interleaved" else 0
    assert s["server_launches"] == 3 + extra, s
    assert s["output_gate"].startswith("tolerance: tolerance gate: top-1 agreement"), s["output_gate"]
    assert "output gate" in printed and "tolerance gate: top-1 agreement" in printed
    assert "torch.cos" in git(repo, "show", s["branch"], "--", MODEL)
    rep = perfloop(home, "replay", s["session"], "--json")  # the scores are recorded tool calls
    assert rep.returncode == 0 and last_json(rep)["matches_recording"], rep.stderr[-2000:]
    html = tmp_path / "report.html"
    assert perfloop(home, "report", s["session"], "-o", str(html)).returncode == 0
    assert "<th>output gate</th><td>tolerance: tolerance gate: top-1 agreement" in html.read_text()


def test_a_tolerance_policy_without_both_thresholds_is_one_line_and_starts_nothing(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    toml = target(tmp_path, repo, 'policy = "tolerance"\nmax_logprob_diff = 0.1\n', "sequential")
    proc = perfloop(home, "run", str(toml))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert 'policy = "tolerance" needs both min_top1_agreement' in proc.stderr
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())
    assert git(repo, "status", "--porcelain") == "" and git(repo, "branch", "--list") == "* main\n"
