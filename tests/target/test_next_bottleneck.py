"""Where the profile points after the cast fix: the demo's decode (a glm5-shaped mixture, small),
profiled on the CPU before and after the kv-cache-full-pool-cast patch and diagnosed with the
built-in playbooks. Before, the whole-pool cast leads; after, it is gone and the dense MoE is
found (moe-dense-experts: every expert's gate and up projected for every token)."""

import subprocess
import sys
from pathlib import Path

from playbooks.engine import diagnose, load_playbooks
from state.profiling.diagnosis import DiagnosisContext
from tests.target.conftest import FIX_DIFF, TARGET
from tests.target.test_fusion_patch import patched
from tools.trace import read_chrome_trace

FLAGS = ["--pool-slots", "16384", "--layers", "2", "--heads", "4", "--hidden", "1024", "--experts", "8"]
FLAGS += ["--ffn", "512", "--max-running", "4", "--threads", "1"]

# Prefill one prompt, then profile 3 decode steps (after 2 warm-up steps) as perfloop's hook does:
# each inside a `forward_decode` record function, shapes recorded; the Chrome trace to argv[1].
SCRIPT = r"""
import sys, torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from mla_server.config import parse_config
from mla_server.model_runner import ModelRunner
from mla_server.scheduler import Request
from mla_server.tokenizer import encode

cfg = parse_config(["--port", "1", *sys.argv[2:]])
torch.set_num_threads(1)
runner = ModelRunner(cfg)
req = Request(encode("Explain the KV cache in one sentence."), 16, 0.0, None, [])
req.slots = runner.kv_pool.allocator.alloc(req.slots_needed)
req.slots_device = torch.tensor(req.slots)
req.output_ids.append(runner.forward_extend(req))
with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
             schedule=schedule(wait=0, warmup=2, active=3, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(5):
        with record_function("forward_decode"):
            req.output_ids.extend(runner.forward_decode(runner.build_decode_batch([req])))
        prof.step()
"""


def findings(target: Path, trace: Path) -> list:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(trace), *FLAGS],
        cwd=target,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ctx = DiagnosisContext(target_kind="mla_server", active_tokens=24)
    return diagnose(read_chrome_trace(trace), ctx, load_playbooks()).findings


def test_after_the_cast_fix_the_profile_points_at_the_dense_experts(tmp_path: Path) -> None:
    before = findings(TARGET, tmp_path / "before.json")
    assert before[0].playbook == "kv-cache-full-pool-cast"
    after = findings(patched(tmp_path, FIX_DIFF), tmp_path / "after.json")
    ids = [f.playbook for f in after]
    assert "kv-cache-full-pool-cast" not in ids and ids[0] == "moe-dense-experts"
    moe = after[0]
    assert all(max(e.dims[1]) == 8 * 2 * 512 for e in moe.evidence)  # the gate/up over all 8 experts
    assert sum(e.share for e in moe.evidence) > 0.1  # measured 0.33 quiet, 0.19 beside two test runs
