"""Collectives across ranks, on real traces: two processes joined by torch.distributed (gloo), each
decoding through perfloop's profiler hook (rank 0 passes the request on to rank 1), rank 1 slowed."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from playbooks.engine import diagnose, load_playbooks
from state.profiling.diagnosis import DiagnosisContext
from tools.trace import read_profiles

ROOT = Path(__file__).resolve().parents[2]
RANK = """
import os, sys, time
import torch, torch.distributed as dist
from tools.workspace.profiler_hook import _perfloop_profiled
rank, slow_s = int(sys.argv[1]), float(sys.argv[2])
dist.init_process_group("gloo", rank=rank, world_size=2)
torch.set_num_threads(1)
w = torch.randn(256, 256)

@_perfloop_profiled
def forward_decode(x):
    for _ in range(4):  # a layer: a matmul, then the all-reduce of its partial output
        x = x @ w
        if rank == 1:
            time.sleep(slow_s)  # rank 1 arrives late: rank 0 waits in the all-reduce
        dist.all_reduce(x)
        x = x / x.norm()
    return x

x = torch.ones(4, 256)
for _ in range(12):
    x = forward_decode(x)
dist.barrier()
dist.destroy_process_group()
# torch 2.13's static destructors abort ~3% of the processes that profiled under gloo (SIGABRT,
# "terminate called without an active exception", with no Python frame; never without the profiler
# or without gloo, 0 of 60 each): the traces are written, so leave without them
sys.stdout.flush()
os._exit(0)
"""


def run_ranks(root: Path, slow_s: float) -> Path:
    """Run both ranks to the end with a profile requested; the folder of rank 0's run."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "request.json").write_text(json.dumps({"id": "r1", "warmup_steps": 2, "active_steps": 4}))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PERFLOOP_PROFILE_DIR": str(root),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(slow_s)], env=env) for r in (0, 1)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    return root / "r1"


def test_rank_traces_through_the_hook_show_the_straggler_and_the_collectives(tmp_path: Path) -> None:
    out = run_ranks(tmp_path, slow_s=0.1)  # 25 ms once: a loaded CPU delayed rank 0 by 77 ms too
    assert (out / "done.json").exists() and (out / "rank1" / "done.json").exists()  # one trace per rank
    assert not (tmp_path / "request.rank1.json").exists()  # rank 1 claimed its request
    profile = read_profiles([out / "trace.json.gz", out / "rank1" / "trace.json.gz"])
    c = profile.collectives
    assert c is not None and c.ranks == 2 and profile.steps == 4
    assert [r.collective_us > 0 for r in profile.ranks] == [True, True]
    # rank 0 waits ~4 x 100 ms per step for rank 1 inside the all-reduces; rank 1 waits far less
    # (only where the shared CPU delays rank 0)
    assert c.rank_collective_us[0] > 80_000 and c.rank_collective_us[0] > 2 * c.rank_collective_us[1]
    assert c.straggler == 1 and c.wait_us > 40_000 and 0.2 < c.share < 1
    assert c.spread < 0.5  # both ranks take about as long per step: one computes, one waits
    ctx = DiagnosisContext(target_kind="mla_server", active_tokens=8)
    found = {f.playbook: f for f in diagnose(profile, ctx, load_playbooks()).findings}
    straggler = found["tp-straggler-rank"]
    assert "for rank 1" in straggler.evidence[0].note and straggler.expected_gain_share > 0.1
    # its own time (rank 1's, which waits for no one) is what a smaller message can save
    upcast = found["allreduce-fp32-upcast"]
    assert 0 < upcast.expected_gain_share < straggler.expected_gain_share


def test_one_rank_has_no_collective_stats(tmp_path: Path) -> None:
    out = run_ranks(tmp_path, slow_s=0.0)
    profile = read_profiles([out / "trace.json.gz"])
    assert profile.collectives is None and profile.ranks == []
    found = [
        f.playbook
        for f in diagnose(
            profile, DiagnosisContext(target_kind="mla_server", active_tokens=8), load_playbooks()
        ).findings
    ]
    assert "tp-straggler-rank" not in found
