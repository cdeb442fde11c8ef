"""The numerics policy in a session on the CPU demo target, with real servers: the cast fix bundled
with a change that moves the math benignly (attention's P@V in float32) is kept `within` the
engine's numerics, the fix bundled with a KV dequantization-scale error of 10% is refused `beyond`.

On the CPU the demo's schedules move nothing (every decode step padded to one shape), so the
yardstick is the baseline's tree launched once beside it with `--dtype float32` (the engine's
precision reference): how far its own rounding puts the baseline from its math; each candidate is
judged by its distance from that math over the baseline's (five prompts: the interval's test).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import (
    edited_diff,
    last_json,
    perfloop,
    playbook_variant,
    processes_in,
    write_target,
)
from tests.e2e.test_tolerance_gate import BACKEND, FIX
from tools.store.sessions import SessionStore

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

PV = [
    ("        probs = scores.softmax(dim=-1).to(q.dtype)\n        return torch.matmul(probs, keys[:, :KV_LORA_RANK])",
     "        probs = scores.softmax(dim=-1)\n        return torch.matmul(probs, keys[:, :KV_LORA_RANK].float()).to(q.dtype)"),
]  # fmt: skip
SCALED = [("        keys = kv.squeeze(1)\n", "        keys = kv.squeeze(1) * 1.1\n")]


def test_a_benign_math_change_is_kept_within_and_a_scale_bug_refused_beyond(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    books = tmp_path / "books"
    playbook_variant(books, "fix-scaled", 0.99, edited_diff(repo, tmp_path, {BACKEND: [*FIX, *SCALED]}))
    playbook_variant(books, "fix-f32-pv", 0.98, edited_diff(repo, tmp_path, {BACKEND: [*FIX, *PV]}))
    toml = write_target(tmp_path / "t.toml", repo, looks=1)
    text = toml.read_text().replace("[correctness]\n", '[correctness]\npolicy = "numerics"\n')
    toml.write_text(text.replace("random_prompts = 1\n", "random_prompts = 3\n"))  # 5 prompts: the interval
    proc = perfloop(home, "run", "--approve", "auto", str(toml), "--json", "--playbooks", str(books),
                    "--no-builtin-playbooks", "--max-iterations", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    by = {d["playbook"]: d for d in shown["decisions"]}

    bug, ok = by["fix-scaled"], by["fix-f32-pv"]
    assert bug["verdict"] == "rejected" and bug["numerics"]["verdict"] == "beyond", bug["reason"]
    assert "beyond the engine's numerics: distance from the float32 math" in bug["reason"]
    assert bug["numerics"]["yardstick"] == ok["numerics"]["yardstick"] == "precise", bug["numerics"]
    assert "float32 precision reference" in bug["reason"]  # the yardstick, named
    assert bug["numerics"]["ratio_low"] > 1, bug["numerics"]
    assert ok["verdict"] == "accepted", ok["reason"]
    assert ok["numerics"]["verdict"] == "within" and ok["numerics"]["ratio_low"] < 1, ok["numerics"]
    assert s["accepted"] == ["fix-f32-pv"] and s["speedup"] > 1.5, s
    assert "fix-f32-pv (kept): within" in s["output_gate"], s["output_gate"]
    assert "fix-scaled (rejected): beyond" in s["output_gate"], s["output_gate"]

    # the precision reference ran once, from the baseline's tree, beside the baseline, and is gone
    calls = SessionStore(home / "sessions.sqlite").tool_calls(s["session"])
    launched = [c.input["launch"]["argv"] for c in calls if c.name == "server.launch"]
    precise = [a for a in launched if a[-4:] == ["--dtype", "float32", "--max-total-tokens", "16384"]]
    assert len(precise) == 1 and len(launched) == s["server_launches"], launched  # its pool made small
    stopped = [c for c in calls if c.name == "server.stop" and c.node == "baseline"]
    assert stopped and all(c.error is None for c in stopped), stopped
    assert processes_in(repo) == []
    rep = perfloop(home, "replay", s["session"], "--json")
    assert rep.returncode == 0 and last_json(rep)["matches_recording"], rep.stderr[-2000:]
