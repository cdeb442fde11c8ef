"""Single-stream decode benchmark of the embedded MLA demo server.

Starts examples/targets/mla_server (CPU preset by default), measures single-stream TPOT (median
over repeats, streamed, temperature 0) and the full-pool cast's share of decode time from a
/start_profile trace. With --compare-fix it repeats the measurement on a git-applied copy with the
playbook's gather-then-cast diff and prints the ratio; with --matrix (cuda) it measures full-pool
cast and gather-then-cast each eagerly (--disable-cuda-graph) and through CUDA graphs. Standard
library only (plus the server's torch), so it runs on a GPU host without openai/pydantic; where
git is missing, --fixed-target names a copy with the diff already applied.

    python benchmarks/mla_server_decode.py [--compare-fix]
    python benchmarks/mla_server_decode.py --device cuda --preset glm5 --matrix
"""

import argparse
import gzip
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "examples" / "targets" / "mla_server"
FIX_DIFF = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "patches" / "mla_server.diff"
CAST_OPS = {"aten::to", "aten::_to_copy", "aten::copy_"}
PROMPT = "Explain in one paragraph why decode attention is memory bound."


def free_port() -> int:
    """A TCP port that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    target: Path, port: int, server_args: list[str], log_path: Path, timeout_s: float = 900
) -> subprocess.Popen:
    """Launch `launch.sh` in its own process group and wait until /health answers."""
    env = {**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["bash", str(target / "launch.sh"), "--port", str(port), *server_args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}; log:\n{log_path.read_text()[-3000:]}")
        try:
            if request_json(port, "GET", "/health", None, timeout=2)[0] == 200:
                return proc
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    sys.exit(f"server not healthy after {timeout_s:.0f} s; see {log_path}")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, then SIGKILL if it lingers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def request_json(port: int, method: str, path: str, body: dict | None, timeout: float = 600):
    """One JSON request; returns (status, decoded body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def stream_chat(port: int, max_tokens: int) -> tuple[str, list[float]]:
    """Stream one greedy completion; return its text and each content chunk's arrival time."""
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"completion failed: HTTP {resp.status} {resp.read()[:500]!r}")
    text, times = "", []
    for line in resp:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        choices = json.loads(line[6:])["choices"]
        content = choices[0]["delta"].get("content") if choices else None
        if content:
            text += content
            times.append(time.perf_counter())
    conn.close()
    return text, times


def measure_tpot(port: int, max_tokens: int, repeats: int) -> tuple[float, float, str]:
    """Median and IQR of the time per output token (after the first) over `repeats` streamed
    requests, and the (greedy) text."""
    stream_chat(port, 4)  # warm-up
    tpots, text = [], ""
    for _ in range(repeats):
        text, times = stream_chat(port, max_tokens)
        tpots.append((times[-1] - times[0]) / (len(times) - 1) * 1000)
    quartiles = statistics.quantiles(tpots, n=4) if len(tpots) > 1 else [tpots[0]] * 3
    return statistics.median(tpots), quartiles[2] - quartiles[0], text


def profile_trace(port: int, steps: int, out_dir: Path) -> Path:
    """Profile `steps` decode steps of a single stream via /start_profile; return the trace."""
    profile_id = f"bench-{int(time.time() * 1000)}"
    status, body = request_json(
        port,
        "POST",
        "/start_profile",
        {"output_dir": str(out_dir), "num_steps": steps, "start_step": 2, "profile_id": profile_id},
    )
    if status != 200:
        sys.exit(f"/start_profile failed: {status} {body}")
    stream_chat(port, steps + 8)
    path = out_dir / f"{profile_id}-TP-0.trace.json.gz"
    deadline = time.monotonic() + 300
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"no trace at {path}")
        time.sleep(0.5)
    return path


def _self_times(ops: list[dict]) -> list[float]:
    """Self time of each op (its duration minus its direct children's), ops sorted by start."""
    self_us, stack = [op["dur"] for op in ops], []
    for i, op in enumerate(ops):
        while stack and ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= op["ts"]:
            stack.pop()
        if stack:
            self_us[stack[-1]] -= op["dur"]
        stack.append(i)
    return self_us


def _is_cast(op: dict, pool_slots: int) -> bool:
    dims = op.get("args", {}).get("Input Dims") or [[]]
    return op["name"] in CAST_OPS and list(dims[0]) == [pool_slots, 1, 576]


def cast_share(events: list[dict], pool_slots: int) -> dict:
    """Cast share of decode time in a Chrome trace: CPU self time, and GPU kernel time if any.

    Decode = ops inside the server's `forward_decode` annotations. CPU share: self time of cast ops
    (aten::to/_to_copy/copy_ whose first input is `[pool_slots, 1, 576]`) over the self time of all
    ops. GPU share: time of kernels launched by those cast ops over all decode kernels (eager only:
    kernels replayed from a CUDA graph have no op). GPU busy, kernels per step and the top kernel
    count every kernel that ran inside a step (each step ends by copying its logits to the host).
    """
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == "forward_decode"]
    inside = lambda e: any(s["tid"] == e["tid"] and s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in steps)
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op" and inside(e)),
        key=lambda e: (e["tid"], e["ts"], -e["dur"]),
    )
    self_us = _self_times(ops)
    n = len(steps)
    cast_us = sum(t for op, t in zip(ops, self_us, strict=False) if _is_cast(op, pool_slots))
    result = {
        "decode_steps": n,
        "step_ms": statistics.mean(s["dur"] for s in steps) / 1000,
        "cpu_share": cast_us / max(sum(self_us), 1e-9),
        "cpu_cast_ms": cast_us / n / 1000,
        **step_kernels(events, steps),
    }
    by_ext = {op["args"].get("External id"): op for op in ops}
    kernels = [k for k in events if k.get("cat") == "kernel" and k["args"].get("External id") in by_ext]
    if kernels:
        busy_us = sum(k["dur"] for k in kernels)
        cast_k = sum(k["dur"] for k in kernels if _is_cast(by_ext[k["args"]["External id"]], pool_slots))
        result.update(gpu_share=cast_k / busy_us, gpu_cast_ms=cast_k / n / 1000)
    return result


def step_kernels(events: list[dict], steps: list[dict]) -> dict:
    """GPU busy ms and kernels per step, and the top kernel's share, over kernels inside the steps."""
    windows = [(s["ts"], s["ts"] + s["dur"]) for s in steps]
    kernels = [k for k in events if k.get("cat") == "kernel" and any(a <= k["ts"] <= b for a, b in windows)]
    if not kernels:
        return {}
    by_name: dict[str, float] = {}
    for k in kernels:
        by_name[k["name"]] = by_name.get(k["name"], 0.0) + k["dur"]
    top, busy = max(by_name, key=by_name.get), sum(by_name.values())
    short = top.split("<")[0].split("(")[0].removeprefix("void ").split("::")[-1]
    return {
        "gpu_busy_ms": busy / len(steps) / 1000,
        "kernels_per_step": len(kernels) / len(steps),
        "top_kernel": short + (" (fp8)" if "Float8" in top else ""),
        "top_kernel_share": by_name[top] / busy,
    }


def measure(target: Path, args, work: Path, name: str, extra: tuple[str, ...] = ()) -> dict:
    """Start one server variant, measure TPOT and the cast share, stop it."""
    port, started = free_port(), time.monotonic()
    proc = start_server(target, port, [*args.server_args, *extra], work / f"{name}.log")
    try:
        ready_s = time.monotonic() - started
        pool_slots = request_json(port, "GET", "/get_server_info", None)[1]["pool_slots"]
        tpot_ms, iqr_ms, text = measure_tpot(port, args.max_tokens, args.repeats)
        trace = profile_trace(port, args.profile_steps, work)
        with gzip.open(trace) as f:
            share = cast_share(json.load(f)["traceEvents"], pool_slots)
    finally:
        stop_server(proc)
    return {
        "variant": name,
        "tpot_ms": tpot_ms,
        "tpot_iqr_ms": iqr_ms,
        "ready_s": ready_s,
        "text": text,
        "trace": str(trace),
        **share,
    }


def patched_copy(work: Path) -> Path:
    """Copy the target, git init + commit, and `git apply` the playbook diff."""
    copy = work / "mla_server_fixed"
    shutil.copytree(TARGET, copy, ignore=shutil.ignore_patterns("__pycache__"))
    git = lambda *a: subprocess.run(["git", "-C", str(copy), *a], check=True, capture_output=True)
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "target")
    git("apply", str(FIX_DIFF))
    return copy


COLUMNS = [
    ("TPOT ms", "tpot_ms", "{:.1f}"),
    ("IQR ms", "tpot_iqr_ms", "{:.1f}"),
    ("profiled step ms", "step_ms", "{:.1f}"),
    ("cast share CPU", "cpu_share", "{:.1%}"),
    ("CPU cast ms/step", "cpu_cast_ms", "{:.1f}"),
    ("cast share GPU", "gpu_share", "{:.1%}"),
    ("GPU cast ms/step", "gpu_cast_ms", "{:.1f}"),
    ("GPU busy ms/step", "gpu_busy_ms", "{:.1f}"),
    ("kernels/step", "kernels_per_step", "{:.0f}"),
    ("top kernel", "top_kernel", "{}"),
    ("its share", "top_kernel_share", "{:.1%}"),
]


def print_table(rows: list[dict]) -> None:
    """A markdown table (GPU columns only when a trace has kernels), then JSON lines."""
    cols = [c for c in COLUMNS if any(c[1] in r for r in rows)]
    print("\n| variant | " + " | ".join(title for title, _, _ in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for r in rows:
        print(
            f"| {r['variant']} | "
            + " | ".join(fmt.format(r[k]) if k in r else "-" for _, k, fmt in cols)
            + " |"
        )
    same = all(r["text"] == rows[0]["text"] for r in rows)
    print(
        f"\nTPOT ratio first/last: {rows[0]['tpot_ms'] / rows[-1]['tpot_ms']:.2f}x; "
        f"greedy output identical across variants: {same}"
    )
    for r in rows:
        print(json.dumps(r))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=["cpu", "glm5"], default="cpu")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per timed request")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--compare-fix", action="store_true", help="also measure the playbook fix")
    p.add_argument(
        "--matrix",
        action="store_true",
        help="cast and fix, each eager (--disable-cuda-graph) and with CUDA graphs",
    )
    p.add_argument("--fixed-target", type=Path, help="a target copy with the diff applied (no git needed)")
    p.add_argument("extra", nargs="*", help="more server flags after --, e.g. -- --pool-slots 8192")
    args = p.parse_args()
    args.server_args = ["--preset", args.preset, "--device", args.device, *args.extra]
    with tempfile.TemporaryDirectory(prefix="mla_bench_") as tmp:
        work = Path(tmp)
        fixed = lambda: args.fixed_target.resolve() if args.fixed_target else patched_copy(work)
        if args.matrix:
            eager, fixed_dir = ("--disable-cuda-graph",), fixed()
            rows = [
                measure(TARGET, args, work, "eager, full-pool cast", eager),
                measure(fixed_dir, args, work, "eager, gather-then-cast", eager),
                measure(TARGET, args, work, "graph, full-pool cast"),
                measure(fixed_dir, args, work, "graph, gather-then-cast"),
            ]
        else:
            rows = [measure(TARGET, args, work, "baseline")]
            if args.compare_fix:
                rows.append(measure(fixed(), args, work, "fixed"))
        print_table(rows)


if __name__ == "__main__":
    main()
