"""Record real torch.profiler traces of the demo server, one per way a trace is taken.

A copy of examples/targets/mla_server with perfloop's hook inserted (as the loop instruments it)
is launched as a server process; then:
- `<tag>-hook.json.gz`: perfloop's hook (`patch` method): `ProfilerStep#N` per decode step;
- `<tag>-api.json.gz`: the server's SGLang-style `/start_profile` (`api` method): no ProfilerStep,
  a `forward_decode` annotation per step;
- `<tag>-bare.json.gz`: a few decode steps of the same model wrapped in `with profile():` in this
  process (no schedule, no `prof.step()`, no annotation): no marker at all.
Usage (from the repository root, PYTHONPATH=.):
  python tests/data/traces/make_served_traces.py OUT_DIR TAG [server flags, e.g. --preset glm5
  --device cuda --layers 6 --disable-cuda-graph]
Prints one JSON line per trace (path, method).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from state.door.calls import ProfileArgs  # noqa: E402
from tools import profiling  # noqa: E402
from tools.workspace.instrumentation import instrumented_source  # noqa: E402

PROMPT = "Explain in one sentence why the sky is blue."
STEPS = 5


def launch(tree: Path, flags: list[str], profile_dir: Path, port: int) -> subprocess.Popen:
    """The server, started; returns once it printed that it is ready."""
    env = {**os.environ, "PERFLOOP_PROFILE_DIR": str(profile_dir), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "mla_server.server", "--port", str(port), "--threads", "1", *flags]
    proc = subprocess.Popen(
        argv, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "ready on" in line:
            return proc
    raise SystemExit(f"the server exited before it was ready ({proc.wait()})")


def args(method: str, port: int, out: Path, profile_dir: Path) -> ProfileArgs:
    return ProfileArgs(
        method=method,
        base_url=f"http://127.0.0.1:{port}",
        model="mla-demo",
        out_dir=out,
        profile_dir=profile_dir,
        profile_id=method,
        warmup_steps=2,
        active_steps=STEPS,
        prompt=PROMPT,
        timeout_s=600,
    )


def bare(tree: Path, flags: list[str], path: Path) -> None:
    """STEPS decode steps under `with profile():`, nothing marked."""
    sys.path.insert(0, str(tree))
    import torch
    from mla_server.config import parse_config
    from mla_server.model_runner import ModelRunner
    from mla_server.scheduler import Request
    from mla_server.tokenizer import encode

    cfg = parse_config(["--port", "1", "--threads", "1", *flags])
    torch.manual_seed(cfg.seed)
    runner = ModelRunner(cfg)
    req = Request(prompt_ids=encode(PROMPT), max_tokens=STEPS + 4, temperature=0.0, seed=None, stop=[])
    req.slots = runner.kv_pool.allocator.alloc(req.slots_needed)
    req.slots_device = torch.tensor(req.slots, device=runner.device)
    req.add_token(runner.forward_extend(req))
    for _ in range(2):  # warm-up
        req.add_token(runner.forward_decode(runner.build_decode_batch([req]))[0])
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cfg.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(STEPS):
            req.add_token(runner.forward_decode(runner.build_decode_batch([req]))[0])
    prof.export_chrome_trace(str(path))


def main(out: Path, tag: str, flags: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "mla_server"
        shutil.copytree(ROOT / "examples/targets/mla_server", tree)
        runner_py = tree / "mla_server/model_runner.py"
        runner_py.write_text(instrumented_source(runner_py.read_text()))
        profile_dir = Path(tmp) / "profiles"
        profile_dir.mkdir()
        port = 30000 + os.getpid() % 20000
        proc = launch(tree, flags, profile_dir, port)
        try:
            for method in ("patch", "api"):
                files = profiling.take(args(method, port, Path(tmp) / "api", profile_dir))
                name = out / f"{tag}-{'hook' if method == 'patch' else 'api'}.json.gz"
                shutil.copy(files.trace_path, name)
                print(json.dumps({"path": str(name), "method": method, "active_tokens": files.active_tokens}))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        bare(tree, flags, out / f"{tag}-bare.json.gz")
        print(json.dumps({"path": str(out / f"{tag}-bare.json.gz"), "method": "with profile()"}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
