"""How often the loop keeps a patch that changes nothing: N fresh `perfloop demo` sessions whose only
playbook is a comment-only patch (the built-in cast playbook's signature, so it always matches).

Each session runs the whole loop as a user would (baseline launch, profile, patch, candidate launch,
the reference launched beside it when `[decide] arms = "interleaved"`, the rule); the table counts
the verdicts. Sessions may run `--workers` at a time (each with its own servers), which is also a
way to load the machine.

    .venv/bin/python benchmarks/noop_sessions.py --sessions 20 --workers 1
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
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


def session(home: Path, books: Path, i: int) -> dict:
    """One `perfloop demo` session with only the no-op playbook; its decision."""
    path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH", "")) if x)
    env = {**os.environ, "PERFLOOP_HOME": str(home / f"s{i}"), "PYTHONPATH": path}
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", CLI, "demo", "--playbooks", str(books), "--no-builtin-playbooks",
         "--max-iterations", "1", "--json"],
        env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip() or proc.stdout.strip() or "?").splitlines()[-3:]
        return {"verdict": "error", "error": " | ".join(tail), "wall_s": time.time() - t0}
    s = json.loads(lines[-1])
    return {
        "verdict": s.get("verdict") or ("gate" if s["rejected"] else "none"),
        "accepted": s["accepted"],
        "ci": s.get("speedup_ci"),
        "decision": s.get("decision"),
        "launches": s["server_launches"],
        "wall_s": time.time() - t0,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="noop-"))
    books = no_op_playbook(tmp / "books")
    t0 = time.time()
    with ThreadPoolExecutor(args.workers) as pool:
        results = []
        for i, r in enumerate(pool.map(lambda i: session(tmp, books, i), range(args.sessions))):
            results.append(r)
            print(f"session {i + 1}/{args.sessions}: {r['verdict']} {r.get('ci') or r.get('error')} "
                  f"({r['wall_s']:.0f} s, load {r.get('load', 0):.1f})", flush=True)  # fmt: skip
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
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    sys.exit(1 if counts["accepted"] else 0)


if __name__ == "__main__":
    main()
