"""How often the loop keeps a patch that changes nothing: N fresh `perfloop demo` sessions whose only
playbook is a comment-only patch (the built-in cast playbook's signature, so it always matches).

Each session runs the whole loop as a user would (baseline launch, profile, patch, candidate launch,
the reference launched beside it when `[decide] arms = "interleaved"`, the rule); the table counts
the verdicts. Sessions may run `--workers` at a time (each with its own servers), which is also a
way to load the machine.

    .venv/bin/python benchmarks/noop_sessions.py --sessions 20 --workers 1

On a GPU host, `--demo-args "--device cuda --preset glm5" --gpus 0,1` runs the glm5 demo, session i
on GPU i mod 2. Each session starts from an empty `PERFLOOP_HOME` (a new host: no stored noise)
with the `[decide]` defaults; the table gives each no-op's interval and the seconds from the
session's start to its measured baseline (the A/A launch that calibrates it included).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "playbook.toml"
BACKEND = "mla_server/attention/mla_backend.py"
LINE = "real = len(batch.kv_indices)\n"
CLI = "import sys; from agent.cli import app; sys.argv[0] = 'perfloop'; app()"  # this interpreter's perfloop


def no_op_playbook(dest: Path) -> Path:
    """A playbook `no-op` with the cast playbook's signature whose patch only adds a comment."""
    text = BUILTIN.read_text().replace('id = "kv-cache-full-pool-cast"', 'id = "no-op"')
    assert 'id = "no-op"' in text, "the built-in playbook's id line changed: update the benchmark"
    src = (ROOT / "examples" / "targets" / "mla_server" / BACKEND).read_text()
    assert LINE in src, "the demo's attention backend changed: update the benchmark"
    new = src.replace(LINE, LINE.rstrip("\n") + "  # reviewed: nothing to change\n", 1)
    diff = "".join(
        difflib.unified_diff(
            src.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{BACKEND}", f"b/{BACKEND}"
        )
    )
    folder = dest / "no-op"
    (folder / "patches").mkdir(parents=True)
    (folder / "playbook.toml").write_text(text)
    (folder / "patches" / "mla_server.diff").write_text(diff)
    return dest


def defaults_target(dest: Path, device: str, preset: str) -> Path:
    """`perfloop run`'s target for a git copy of the demo at `dest/mla_server`: the demo's target
    file with its `[decide]` table removed (every decision setting at perfloop's default, as a
    user's new target has), on `device` with `preset`, long prompts at their default."""
    repo = dest / "mla_server"
    shutil.copytree(
        ROOT / "examples" / "targets" / "mla_server", repo, ignore=shutil.ignore_patterns("__pycache__")
    )
    git = ["git", "-c", "user.name=perfloop", "-c", "user.email=perfloop@localhost"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "mla_server"]):
        subprocess.run(git + cmd, cwd=repo, check=True)
    argv = ["bash", "launch.sh", "--port", "{port}", "--preset", preset, "--device", device]
    out, skip = [], False
    for line in (ROOT / "examples" / "targets" / "mla_server.toml").read_text().splitlines():
        if line.startswith("["):
            skip = line.startswith("[decide]")
        if skip or line.startswith("long_prompts"):
            continue
        if line.startswith("repo = "):
            line = f"repo = {json.dumps(str(repo))}"
        elif line.startswith("argv = ") and device != "cpu":
            line = f"argv = {json.dumps(argv)}"
        out.append(line)
    assert not any(x.startswith("[decide]") for x in out), (
        "the demo's target file changed: update the benchmark"
    )
    path = dest / "target.toml"
    path.write_text("\n".join(out) + "\n")
    return path


def session(home: Path, books: Path, i: int, args: argparse.Namespace) -> dict:
    """One session with only the no-op playbook (`perfloop demo`, or with `--defaults` `perfloop
    run` on the demo's target with `[decide]` at the defaults); its decision."""
    path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH", "")) if x)
    env = {**os.environ, "PERFLOOP_HOME": str(home / f"s{i}"), "PYTHONPATH": path}
    if gpus := [g for g in args.gpus.split(",") if g]:
        env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
    command = ["demo", *shlex.split(args.demo_args)]
    if args.defaults:
        device, preset = args.defaults.split(":")
        command = ["run", str(defaults_target(home / f"t{i}", device, preset)), "--approve", "auto"]
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", CLI, *command, "--playbooks", str(books), "--no-builtin-playbooks",
         "--max-iterations", "1", "--json"],
        env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip() or proc.stdout.strip() or "?").splitlines()[-3:]
        return {
            "verdict": "error",
            "error": " | ".join(tail),
            "wall_s": time.time() - t0,
            "home": env["PERFLOOP_HOME"],
        }
    s = json.loads(lines[-1])
    shown = subprocess.run(
        [sys.executable, "-c", CLI, "show", s["session"], "--json"],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    return {
        "session": s["session"],
        "home": env["PERFLOOP_HOME"],
        "verdict": s.get("verdict") or ("gate" if s["rejected"] else "none"),
        "accepted": s["accepted"],
        "ci": s.get("speedup_ci"),
        "decision": s.get("decision"),
        "launches": s["server_launches"],
        "to_baseline_s": to_baseline(shown.stdout),
        "launch_noise": s.get("launch_noise"),
        "wall_s": time.time() - t0,
        "load": os.getloadavg()[0],
    }


def to_baseline(show_json: str) -> float | None:
    """Seconds from the session's start to its measured baseline (its A/A launch included), from
    `perfloop show --json`; None if it has no baseline (pure)."""
    try:
        shown = json.loads(show_json)
    except ValueError:
        return None
    start = datetime.fromisoformat(shown["session"]["created_at"])
    ends = [datetime.fromisoformat(t["at"]) for t in shown["transitions"] if t["node"] == "baseline"]
    return (ends[0] - start).total_seconds() if ends else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--demo-args", default="", help="more `perfloop demo` flags, e.g. '--device cuda'")
    p.add_argument(
        "--defaults",
        default="",
        metavar="DEVICE:PRESET",
        help="e.g. cuda:glm5: `perfloop run` on the demo's target with [decide] at the defaults",
    )
    p.add_argument("--gpus", default="", help="e.g. 0,1: session i on GPU i mod n")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="noop-"))
    books = no_op_playbook(tmp / "books")
    t0 = time.time()
    with ThreadPoolExecutor(args.workers) as pool:
        results = []
        for i, r in enumerate(pool.map(lambda i: session(tmp, books, i, args), range(args.sessions))):
            results.append(r)
            print(f"session {i + 1}/{args.sessions}: {r['verdict']} {r.get('ci') or r.get('error')} "
                  f"({r['wall_s']:.0f} s, baseline after {r.get('to_baseline_s')} s, "
                  f"load {r.get('load', 0):.1f}): {r.get('decision')}", flush=True)  # fmt: skip
    counts = Counter(r["verdict"] for r in results)
    loads = [r["load"] for r in results if "load" in r]
    print("| sessions | accepted | rejected | regression | inconclusive | error | load (1-min avg) min-max |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {len(results)} | {counts['accepted']} | {counts['rejected']} | {counts['regression']} "
        f"| {counts['inconclusive']} | {counts['error']} | {min(loads, default=0):.1f}-{max(loads, default=0):.1f} |"
    )
    print(
        f"wall {(time.time() - t0) / 60:.1f} min; median session {statistics.median(r['wall_s'] for r in results):.0f} s"
    )
    half = [max(r["ci"][1] - 1, 1 - r["ci"][0]) for r in results if r.get("ci")]
    base = [r["to_baseline_s"] for r in results if r.get("to_baseline_s") is not None]
    if half:
        print(
            f"no-op interval half-width: median {100 * statistics.median(half):.1f}%, widest {100 * max(half):.1f}%"
        )
    if base:
        print(f"start to measured baseline (A/A launch included): median {statistics.median(base):.0f} s, "
              f"longest {max(base):.0f} s")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    sys.exit(1 if counts["accepted"] else 0)


if __name__ == "__main__":
    main()
