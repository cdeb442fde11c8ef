"""Traces of the glm5 demo on one H200 with what each fix realizes there, for the held-out check of
the gain model (issue 42). Standard library and torch only (the device machine has no registry):
the targets arrive prepared by `gain_traces_h200.sh` (instrumented by perfloop's hook, the fixed
one with the cast playbook's diff applied).

For each variant (`cast`: the full-pool cast, `fixed`: gather-then-cast) and mode (`eager`:
--disable-cuda-graph, `graphs`): launch the server, measure the streamed TPOT, take one trace by the
API method (`/start_profile`, `forward_decode` windows) and one by the patch method (the hook,
`ProfilerStep` windows), measure the TPOT again, stop the server. Writes `<variant>-<mode>-api.json.gz`
and `-hook.json.gz` into one tar per variant under OUT, and `realized.json`: each launch's TPOTs
(before and after its profiles), so what CUDA graphs alone realize is eager TPOT / graphs TPOT of
the same variant in the same call.

    python3 gain_traces_h200.py TARGETS_DIR OUT [--variants cast,fixed] [--steps 4]
"""

import argparse
import json
import os
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from mla_server_decode import free_port, profile_trace, start_server, stop_server, stream_chat  # noqa: E402


def tpots(port: int, max_tokens: int, repeats: int) -> list[float]:
    """Each streamed request's time per output token after the first, in ms."""
    stream_chat(port, 4)
    out = []
    for _ in range(repeats):
        _, times = stream_chat(port, max_tokens)
        out.append((times[-1] - times[0]) / (len(times) - 1) * 1000)
    return out


def hook_trace(port: int, profile_dir: Path, steps: int) -> Path:
    """A trace by perfloop's hook: a request.json in PERFLOOP_PROFILE_DIR, then enough decode steps."""
    pid = f"hook-{int(time.time() * 1000)}"
    (profile_dir / "request.tmp").write_text(
        json.dumps({"id": pid, "warmup_steps": 2, "active_steps": steps})
    )
    os.replace(profile_dir / "request.tmp", profile_dir / "request.json")
    stream_chat(port, steps + 8)
    done = profile_dir / pid / "done.json"
    deadline = time.monotonic() + 300
    while not done.exists():
        if (profile_dir / pid / "error.txt").exists() or time.monotonic() > deadline:
            sys.exit(f"hook trace failed: {pid}")
        time.sleep(0.5)
    return profile_dir / pid / "trace.json.gz"


def one(target: Path, variant: str, mode: str, args, work: Path, tar: tarfile.TarFile) -> dict:
    """One launch: TPOT, the two traces, TPOT again."""
    profile_dir = work / f"{variant}-{mode}-profiles"
    profile_dir.mkdir()
    os.environ["PERFLOOP_PROFILE_DIR"] = str(profile_dir)
    flags = [*args.server.split(), *(["--disable-cuda-graph"] if mode == "eager" else [])]
    t0 = time.monotonic()
    port = free_port()
    proc = start_server(target, port, flags, work / f"{variant}-{mode}.log")
    row: dict = {"variant": variant, "mode": mode, "ready_s": time.monotonic() - t0}
    try:
        row["tpot_before_ms"] = tpots(port, args.max_tokens, args.repeats)
        for method, take in (
            ("api", lambda: profile_trace(port, args.steps, work)),
            ("hook", lambda: hook_trace(port, profile_dir, args.steps)),
        ):
            started = time.monotonic()
            path = take()
            tar.add(path, arcname=f"{variant}-{mode}-{method}.json.gz")
            row[f"{method}_s"] = time.monotonic() - started
        row["tpot_after_ms"] = tpots(port, args.max_tokens, args.repeats)
    finally:
        stop_server(proc)
    every = row["tpot_before_ms"] + row["tpot_after_ms"]
    row["tpot_ms"] = statistics.median(every)
    row["launch_s"] = time.monotonic() - t0
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("targets", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--variants", default="cast,fixed")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--server", default="--preset glm5 --device cuda", help="server flags (a CPU check: --preset cpu)"
    )
    p.add_argument("--budget-s", type=float, default=480, help="start no launch after this many seconds")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gain-traces-"))  # fresh: a warm machine keeps /tmp
    t0, rows = time.monotonic(), []
    for variant in args.variants.split(","):
        with tarfile.open(args.out / f"traces-{variant}.tar", "w") as tar:
            for mode in ("eager", "graphs"):
                if time.monotonic() - t0 > args.budget_s:
                    print(f"skipped {variant} {mode}: past the budget", flush=True)
                    continue
                rows.append(one(args.targets / variant, variant, mode, args, work, tar))
    realized = {}
    for variant in {r["variant"] for r in rows}:
        by = {r["mode"]: r for r in rows if r["variant"] == variant}
        if {"eager", "graphs"} <= by.keys():
            realized[variant] = by["eager"]["tpot_ms"] / by["graphs"]["tpot_ms"]
    doc = {"rows": rows, "graphs_alone_realized": realized, "seconds": time.monotonic() - t0}
    (args.out / "realized.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps({"graphs_alone_realized": realized, "seconds": doc["seconds"]}))


if __name__ == "__main__":
    main()
