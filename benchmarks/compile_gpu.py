"""The demo's exact compile path on one GPU (issue 58): decode step time and logits of the glm5
preset, one request, for eager, eager + the cast fix, the cast fix under CUDA graphs and the cast
fix with `--enable-torch-compile` (exact mode) under CUDA graphs; each variant's largest logit
difference from eager's over the same greedy steps, and its start-up (model, compile, graphs).

    python3 benchmarks/compile_gpu.py                 # about 3-5 minutes on an H100 (cold compile)
    python3 benchmarks/compile_gpu.py --inexact       # also compile with inductor's defaults
    python3 benchmarks/compile_gpu.py --default-sizes # also the launch a session makes (bs 1, 2, 4, 8)
    python3 benchmarks/compile_gpu.py --fixed-target DIR   # a copy with the cast fix (no git there)

Each variant runs in its own process (one glm5 runner at a time: a 21 GiB KV pool and 13.6 GB of
weights), in-process, no HTTP: prefill one prompt, record `--record-steps` greedy decode steps'
logits, then time `--timed-steps` whole decode steps (`ModelRunner.forward_decode`: batch build,
graph replay or eager step, sampling with its copy to the host), synchronized. CUDA graphs are
captured for batch size 1 only (`--cuda-graph-bs 1`), so the compiled variant compiles one size.
Standard library + torch only (the GPU machine's Python has no perfloop dependencies).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "examples" / "targets" / "mla_server"
FIX_DIFF = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "patches" / "mla_server.diff"
FLAGS = ["--preset", "glm5", "--device", "cuda", "--cuda-graph-bs", "1"]

CHILD = r"""
import json, sys, time, torch
args = json.loads(sys.argv[1])
if args["inexact"]:
    from mla_server import compile as mla_compile
    mla_compile.EXACT.clear()
from mla_server.config import parse_config
from mla_server.model_runner import ModelRunner, sample
from mla_server.scheduler import Request
from mla_server.tokenizer import encode

cfg = parse_config(["--port", "1", *args["flags"]])
started = time.monotonic()
runner = ModelRunner(cfg, static_decode=True)  # (static on cuda anyway; a CPU dry-run too)
cuda = cfg.device == "cuda"
sync = torch.cuda.synchronize if cuda else (lambda: None)
sync()
startup_s = time.monotonic() - started
req = Request(encode(args["prompt"]), args["record"] + args["timed"] + 8, 0.0, None, [])
req.slots = runner.kv_pool.allocator.alloc(req.slots_needed)
req.slots_device = torch.tensor(req.slots, device=cfg.device)
req.output_ids.append(runner.forward_extend(req))
logits = []
for _ in range(args["record"]):
    step = runner.graph_runner.forward(runner.build_decode_batch([req]))[:1].float().clone()
    logits.append(step)
    req.output_ids.append(sample(step, [req])[0])
times = []
for _ in range(args["timed"]):
    sync()
    t = time.perf_counter()
    req.output_ids.append(runner.forward_decode(runner.build_decode_batch([req]))[0])
    sync()
    times.append((time.perf_counter() - t) * 1000)
torch.save(torch.cat(logits).cpu(), args["out"])
compiled = runner.compiled
print(json.dumps({"startup_s": startup_s, "times_ms": times,
                  "tokens": req.output_ids[: args["record"] + 1],
                  "graphs": sorted(runner.graph_runner.graphs),
                  "compile_s": compiled.compile_s if compiled else None,
                  "settings": compiled.settings if compiled else None,
                  "torch": torch.__version__, "device": torch.cuda.get_device_name() if cuda else "cpu"}))
"""


def fixed_copy(work: Path) -> Path:
    """A copy of the demo with the cast fix (git apply, else patch -p1)."""
    copy = work / "mla_server-fixed"
    shutil.copytree(TARGET, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if shutil.which("git"):
        subprocess.run(["git", "apply", str(FIX_DIFF)], cwd=copy, check=True)
    elif shutil.which("patch"):
        subprocess.run(["patch", "-p1", "-i", str(FIX_DIFF)], cwd=copy, check=True, capture_output=True)
    else:
        sys.exit("compile_gpu: neither git nor patch here: pass --fixed-target DIR (the cast fix applied)")
    return copy


def run_variant(
    target: Path, flags: list[str], out: Path, a: argparse.Namespace, inexact: bool = False
) -> dict:
    """One variant in its own process; its JSON line."""
    args = {
        "flags": [*FLAGS, *flags, *a.server_args.split()],
        "prompt": a.prompt,
        "record": a.record_steps,
        "timed": a.timed_steps,
        "out": str(out),
        "inexact": inexact,
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)],
        cwd=target,
        capture_output=True,
        text=True,
        timeout=a.timeout_s,
    )
    if done.returncode != 0:
        sys.exit(f"compile_gpu: variant {flags} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fixed-target", type=Path, help="a copy of the demo with the cast fix applied")
    p.add_argument("--inexact", action="store_true", help="also the compile with inductor's defaults")
    p.add_argument(
        "--default-sizes",
        action="store_true",
        help="also the compiled launch with the preset's CUDA-graph sizes (1, 2, 4, 8): its start-up",
    )
    p.add_argument("--prompt", default="Explain the KV cache in one sentence.")
    p.add_argument("--record-steps", type=int, default=16, help="greedy steps whose logits are compared")
    p.add_argument("--timed-steps", type=int, default=30)
    p.add_argument("--timeout-s", type=int, default=420, help="per variant")
    p.add_argument(
        "--server-args",
        default="",
        help="more server flags for every variant (a CPU dry-run: "
        "'--device cpu --preset cpu --pool-slots 4096')",
    )
    a = p.parse_args()
    import torch  # fail early where torch is missing

    with tempfile.TemporaryDirectory(prefix="compile-gpu-") as tmp:
        work = Path(tmp)
        fixed = a.fixed_target or fixed_copy(work)
        variants = [
            ("eager (--disable-cuda-graph), full-pool cast", TARGET, ["--disable-cuda-graph"], False),
            ("eager, cast fix", fixed, ["--disable-cuda-graph"], False),
            ("cast fix + CUDA graph", fixed, [], False),
            ("cast fix + torch.compile (exact) + CUDA graph", fixed, ["--enable-torch-compile"], False),
        ]
        if a.default_sizes:  # the launch a session makes: every CUDA-graph size compiled and captured
            variants.append(
                (
                    "cast fix + torch.compile (exact), graphs and compiles for bs 1, 2, 4, 8",
                    fixed,
                    ["--enable-torch-compile", "--cuda-graph-bs", "1", "2", "4", "8"],
                    False,
                )
            )
        if a.inexact:
            variants.append(
                (
                    "cast fix + torch.compile (inductor defaults) + CUDA graph",
                    fixed,
                    ["--enable-torch-compile"],
                    True,
                )
            )
        import torch

        rows, reference = [], None
        for i, (name, target, flags, inexact) in enumerate(variants):
            res = run_variant(target, flags, work / f"logits-{i}.pt", a, inexact)
            logits = torch.load(work / f"logits-{i}.pt")
            if reference is None:
                reference, ref_tokens = logits, res["tokens"]
            res.update(
                name=name,
                flags=flags,
                max_diff=(logits - reference).abs().max().item(),
                same_tokens=res["tokens"] == ref_tokens,
                step_ms=statistics.median(res["times_ms"]),
            )
            rows.append(res)
            print(f"{name}: {res['step_ms']:.2f} ms/step, start-up {res['startup_s']:.1f} s", flush=True)

    print(
        f"\n{rows[0]['device']}, torch {rows[0]['torch']}, glm5 preset, one request, "
        f"median of {a.timed_steps} steps; logits over {a.record_steps} greedy steps vs eager's"
    )
    print(
        "| variant | step ms | IQR ms | start-up s | compile s | max logit diff vs eager | greedy tokens same |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        q = statistics.quantiles(r["times_ms"], n=4)
        comp = f"{r['compile_s']:.1f}" if r["compile_s"] is not None else "-"
        print(
            f"| {r['name']} | {r['step_ms']:.2f} | {q[2] - q[0]:.2f} | {r['startup_s']:.1f} | {comp} "
            f"| {r['max_diff']:.4g} | {'yes' if r['same_tokens'] else 'NO'} |"
        )
    for r in rows:
        if r["settings"] is not None:
            print(f"{r['name']}: inductor settings made: {', '.join(r['settings']) or 'none (defaults)'}")
    print(json.dumps([{k: v for k, v in r.items() if k != "times_ms"} for r in rows]))


if __name__ == "__main__":
    main()
