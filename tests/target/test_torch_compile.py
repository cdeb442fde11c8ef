"""`--enable-torch-compile` on the demo server: compiled decode gives eager decode's logits bit for
bit and its greedy tokens (cpu preset per-request decode; the static step with the cast fix
applied), the exact settings are what make it so, and the server compiles before it is ready and
says how long that took."""

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.target.conftest import SMALL, TARGET, Server, free_port, launch, wait_healthy
from tests.target.test_fusion_patch import FIX_DIFF, patched

# Prefill three prompts, decode 6 steps for all of them together with an eager and a compiled
# runner of the same config; print both runners' greedy texts, the largest logit difference over
# every decode step, and the compile's report. `--inexact`: the inductor defaults instead of the
# exact settings (compile.EXACT emptied), to show what they change.
SCRIPT = r"""
import functools, json, sys, torch
from mla_server import compile as mla_compile
from mla_server.config import parse_config
from mla_server.model_runner import ModelRunner, sample
from mla_server.scheduler import Request
from mla_server.tokenizer import encode

flags = [a for a in sys.argv[1:] if a not in ("--static", "--inexact")]
static = "--static" in sys.argv or None
if "--inexact" in sys.argv:
    mla_compile.EXACT.clear()

def step_logits(runner, batch):
    if runner.graph_runner is not None:
        return runner.graph_runner.forward(batch).clone()
    attend = functools.partial(runner.attn_backend.forward_decode, batch=batch)
    h = runner.run_layers(runner.model.embed[batch.input_ids], batch.positions, attend, decode=True)
    return runner.model.logits(h)

def generate(runner, prompts, steps=6):
    reqs, logits = [], []
    for prompt in prompts:
        req = Request(encode(prompt), steps + 1, 0.0, None, [])
        req.slots = runner.kv_pool.allocator.alloc(req.slots_needed)
        req.slots_device = torch.tensor(req.slots)
        req.output_ids.append(runner.forward_extend(req))
        reqs.append(req)
    for _ in range(steps):
        step = step_logits(runner, runner.build_decode_batch(reqs))[: len(reqs)]
        logits.append(step)
        for req, token in zip(reqs, sample(step, reqs)):
            req.output_ids.append(token)
    return [bytes(r.output_ids).decode() for r in reqs], torch.stack(logits)

prompts = ["The quick brown fox", "MLA", "a third prompt, longer than the others"]
eager = ModelRunner(parse_config(["--port", "1", *flags]), static_decode=static)
compiled = ModelRunner(parse_config(["--port", "1", "--enable-torch-compile", *flags]), static_decode=static)
eager_text, eager_logits = generate(eager, prompts)
compiled_text, compiled_logits = generate(compiled, prompts)
c = compiled.compiled
print(json.dumps({"eager": eager_text, "compiled": compiled_text,
                  "max_diff": (eager_logits - compiled_logits).abs().max().item(),
                  "compile_s": c.compile_s, "batch_sizes": c.batch_sizes, "settings": c.settings,
                  "eager_is_eager": eager.compiled is None}))
"""


def compare(target: Path, *flags: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, *flags], cwd=target, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_compiled_decode_gives_eager_logits_bit_for_bit_on_the_cpu_preset() -> None:
    res = compare(TARGET, "--preset", "cpu", "--threads", "1")
    assert res["eager_is_eager"] and res["batch_sizes"] == [4]  # the cpu decode's padded rows
    assert res["compiled"] == res["eager"]
    assert res["max_diff"] == 0.0
    assert "emulate_precision_casts=True" in res["settings"] and "pattern_matcher=False" in res["settings"]
    assert res["compile_s"] > 0


def test_compiled_static_step_with_the_cast_fix_gives_eager_logits(tmp_path: Path) -> None:
    """The cuda decode path (static step, compiled masked attention), run on the CPU, on the tree
    with the kv-cache-full-pool-cast patch applied (gather, then cast)."""
    fixed = patched(tmp_path, FIX_DIFF)
    res = compare(fixed, "--static", *SMALL, "--cuda-graph-bs", "4", "--context-len", "256")
    assert res["batch_sizes"] == [4]
    assert res["compiled"] == res["eager"] and res["max_diff"] == 0.0


def test_without_the_exact_settings_inductor_moves_the_logits() -> None:
    """Inductor's defaults (pattern rewrites such as `h + x @ W.T` into one addmm, which rounds
    once where eager rounds twice) change the logits: the exact settings are what keep them."""
    res = compare(TARGET, "--inexact", *SMALL)
    assert res["settings"] == []
    assert res["max_diff"] > 0.0


def test_the_server_compiles_before_it_is_ready_and_reports_it(tmp_path: Path) -> None:
    healthy_after: dict[str, float] = {}

    def serve(*flags: str) -> Server:
        port, started = free_port(), time.monotonic()
        server = Server(
            launch(TARGET, ["--port", str(port), *SMALL, *flags], tmp_path / f"{port}.log"),
            port,
            tmp_path / f"{port}.log",
        )
        wait_healthy(server, timeout_s=300)
        healthy_after[" ".join(flags)] = time.monotonic() - started  # what a launcher times
        return server

    plain, compiled = serve(), serve("--enable-torch-compile")
    try:
        status, info = compiled.get("/get_server_info")
        assert status == 200 and info["enable_torch_compile"] is True
        assert info["torch_compile_batch_sizes"] == [4] and info["torch_compile_s"] > 0
        assert healthy_after["--enable-torch-compile"] > info["torch_compile_s"]  # inside the launch
        assert "emulate_precision_casts=True" in info["torch_compile_settings"]
        assert "torch.compile: decode batch sizes [4] compiled" in compiled.log_path.read_text()
        assert plain.get("/get_server_info")[1]["torch_compile_s"] is None
        body = {"text": "The KV cache", "sampling_params": {"max_new_tokens": 12, "temperature": 0}}
        texts = [s.post("/generate", body)[1]["text"] for s in (plain, compiled)]
        assert texts[0] == texts[1] and len(texts[0]) == 12
    finally:
        plain.stop()
        compiled.stop()


def test_compile_with_tensor_parallel_is_refused_in_one_line() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mla_server.server",
            "--port",
            "1",
            "--enable-torch-compile",
            "--tp-size",
            "2",
        ],
        cwd=TARGET,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        == "mla_server: error: --enable-torch-compile is not supported with --tp-size > 1 here"
    )
