"""The loop on the demo target at --tp-size 2 (two real processes joined by gloo), through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import CI_CORRECTNESS, CI_MEASURE, assert_clean, last_json, perfloop, processes_in
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e


def tp2_target(path: Path, repo: Path) -> Path:
    """The e2e workload on two ranks, one thread each; profiled through perfloop's hook in each rank
    (the api method's trace per rank is tested on the server itself: tests/target)."""
    path.write_text(f"""
name = "e2e mla_server tp2"
kind = "mla_server"
repo = "{repo}"
model = "mla-demo"
tp_size = 2
[launch]
argv = ["bash", "launch.sh", "--port", "{{port}}", "--preset", "cpu", "--threads", "1", "--tp-size", "2"]
env = {{ PYTHON = "{{python}}" }}
startup_timeout_s = 120
{CI_MEASURE}{CI_CORRECTNESS}[profile]
method = "patch"
[decide]
looks = 1
arms = "sequential"  # as before `auto`: the subject is the two ranks, not the arms (CI time)
auto_aa_pairs = 0  # nor an A/A launch at the baseline
""")
    return path


def test_tp2_keeps_the_cast_fix_with_identical_outputs(tmp_path: Path, home: Path, repo: Path) -> None:
    """Both ranks profiled through the instrumentation and merged (collective share, spread), the
    cast fix accepted with the same greedy outputs, the instrumentation removed, every rank of every
    launch gone at the end, and the session replays."""
    proc = perfloop(
        home,
        "run",
        "--approve",
        "auto",
        str(tp2_target(tmp_path / "t.toml", repo)),
        "--json",
        "--max-iterations",
        "1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    assert s["status"] == "done" and s["accepted"] == ["kv-cache-full-pool-cast"], s
    assert s["outputs_identical"] is True and s["speedup"] > 1.5, s
    assert s["profile_method"] == "patch"
    store = SessionStore(home / "sessions.sqlite")
    (take,) = [c for c in store.tool_calls(s["session"]) if c.name == "profile.take"]
    assert take.output is not None
    folder = Path(take.output["trace_path"])  # <id>/ranks: rank 0's trace and rank 1's (<id>/rank1)
    names = sorted(f.name.split("-TP-")[1] for f in folder.glob("*-TP-*.trace.json.gz"))
    assert (
        names == ["0.trace.json.gz", "1.trace.json.gz"] and (folder.parent / "rank1" / "done.json").exists()
    )
    (read,) = [c for c in store.tool_calls(s["session"]) if c.name == "profile.read"]
    assert read.output is not None
    ranks, stats = read.output["ranks"], read.output["collectives"]
    assert len(ranks) == 2 and all(r["collective_us"] > 0 for r in ranks), ranks
    assert stats["ranks"] == 2 and 0 < stats["share"] < 1 and len(stats["rank_step_us"]) == 2, stats
    assert_clean(repo, s)
    assert processes_in(repo) == []
    replayed = perfloop(home, "replay", s["session"], "--json")
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True, replayed.stderr
