"""perfloop's trace analysis against HolisticTraceAnalysis (HTA), per trace size, in one run.

Writes real-shaped torch.profiler traces (`kineto_trace.py`: an MLA decode step of 61 layers) into
a temporary folder: one plain-JSON file per size in --sizes-gb, and a set of --ranks files
totalling --ranks-gb (one per tensor-parallel rank). Then, for each single file:
  * HTA: TraceAnalysis(...).get_gpu_kernel_breakdown(duration_ratio=1.0, num_kernels=10), with
    HTA_DISABLE_NS_ROUNDING=1 (by default HTA trims every event to whole microseconds, which moves
    the shares of short kernels by several points), once, up to --hta-max-gb;
  * perfloop: `perfloop analyze TRACE --by kernel --json --top 10` with PERFLOOP_TRACE_WORKERS=1
    and =2, alternated --repeats times;
and for the rank set `perfloop analyze DIR` and `perfloop diagnose DIR` (merged ranks). Each command
runs in its own process tree; wall time from here, peak memory as the largest sum of the Pss of the
whole tree (parent and workers), sampled every 100 ms. Prints one table row per trace and tool with
MB/s (uncompressed bytes / wall time), the CPU seconds of the process tree (MB per CPU second
does not depend on how loaded the machine is), and the ratios to HTA, and whether the top-10 kernels and
their shares agree with HTA within 0.5 percentage points.

Usage: python benchmarks/trace_analysis_vs_hta.py [--sizes-gb 0.1,1] [--ranks-gb 4 --ranks 8]
       [--repeats 3] [--hta-python PY] [--hta-max-gb 1] [--keep]
HTA is not a perfloop dependency: install it where --hta-python points (see benchmarks/README.md);
without it the HTA rows are left out.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from kineto_trace import LAYERS, write_trace

ROOT = Path(__file__).resolve().parents[1]
HTA_RUNNER = """
import json, os, sys
os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"  # keep ns durations (HTA rounds each event to whole us)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_files={0: sys.argv[1]}, trace_dir="", include_last_profiler_step=True)
types, kernels = a.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10)
comp = kernels[kernels["kernel_type"] == "COMPUTATION"]
total = float(comp["sum (us)"].sum())
rows = comp[comp["name"] != "others"].sort_values("sum (us)", ascending=False).head(10)
print(json.dumps([[n, float(s) / total] for n, s in zip(rows["name"], rows["sum (us)"])]))
"""
PERFLOOP = [sys.executable, "-c", "import agent.cli as cli; (getattr(cli, 'main', None) or cli.app)()"]


def _tree_pss_kb(pid: int) -> int:
    """Summed proportional set size (Pss: a page shared by n processes counts 1/n in each, so forked
    workers' shared pages count once) of `pid` and all its descendants (0 for those gone meanwhile)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total


def measure(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> tuple[float, float, str, float]:
    """(wall s, peak memory (Pss) of the process tree in GB, last stdout line, CPU s of the tree:
    user + system of the command and the workers it waited for) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd, env={**os.environ, **(env or {})})
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_pss_kb(proc.pid))
            time.sleep(0.1)
        wall = time.perf_counter() - start
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        sys.exit(f"{argv[:3]} failed (exit {proc.returncode}): {stderr.strip()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, peak / 1e6, stdout.strip().splitlines()[-1] if stdout.strip() else "", cpu


def top10(perfloop_json: str) -> list[list]:
    """[name, share] of the first 10 kernel rows of `analyze --by kernel --json`."""
    return [[row["name"], row["share"]] for row in json.loads(perfloop_json)["ops"]][:10]


def compare(hta_top: list[list], ours: list[list]) -> str:
    """Same names in the same order, and the largest share difference in percentage points."""
    same = [n for n, _ in hta_top] == [n for n, _ in ours]
    worst = 100 * max(abs(a[1] - b[1]) for a, b in zip(hta_top, ours, strict=False))
    return f"{'same' if same else 'DIFFERENT'} top-10, max share diff {worst:.3f} pp"


def progress(line: str) -> str:
    """Print a finished row at once (the table comes again at the end)."""
    print(line, flush=True)
    return line


def row(trace: str, tool: str, size: int, runs: list[tuple[float, float, str, float]], note: str = "") -> str:
    """One table row: median wall time (range), MB/s of the median, CPU seconds (median) and MB per
    CPU second, peak memory (largest)."""
    walls = sorted(r[0] for r in runs)
    spread = f" ({walls[0]:.1f}-{walls[-1]:.1f})" if len(walls) > 1 else ""
    cpu = median(r[3] for r in runs)
    peak = max(r[1] for r in runs)
    return (
        f"| {trace} | {tool} | {median(walls):.2f}{spread} | {size / 1e6 / median(walls):.0f} | "
        f"{cpu:.1f} | {size / 1e6 / cpu:.0f} | {peak:.2f} | {note} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-gb", default="0.1,1", help="Single-file trace sizes, comma-separated.")
    parser.add_argument("--ranks-gb", type=float, default=4.0, help="Total size of the rank set (0: none).")
    parser.add_argument("--ranks", type=int, default=8, help="Files (ranks) in the rank set.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each perfloop variant.")
    parser.add_argument("--hta-python", default=sys.executable, help="Interpreter with HTA installed.")
    parser.add_argument("--hta-max-gb", type=float, default=1.0, help="Largest file HTA is run on.")
    parser.add_argument("--keep", action="store_true", help="Keep the traces' temporary folder.")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="Another perfloop source tree (e.g. `git archive main`) run as one more variant on single files.",
    )
    args = parser.parse_args()
    try:
        has_hta = subprocess.run([args.hta_python, "-c", "import hta"], capture_output=True).returncode == 0
    except OSError:
        has_hta = False
    if not has_hta:
        print(f"HTA is not importable by {args.hta_python}: HTA rows left out", file=sys.stderr)
    load = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="trace-bench-"))
    rows: list[str] = []
    notes: list[str] = []
    try:
        for gb in (float(x) for x in args.sizes_gb.split(",") if x):
            trace = folder / f"single-{gb:g}gb.trace.json"
            steps = write_trace(trace, int(gb * 1e9))
            size = trace.stat().st_size
            label = f"{size / 1e9:.2f} GB, 1 file"
            notes.append(f"{label}: {steps} decode steps of {LAYERS} layers")
            hta = None
            if has_hta and gb <= args.hta_max_gb:
                hta = measure([args.hta_python, "-c", HTA_RUNNER, str(trace)])
                rows.append(progress(row(label, "HTA 0.5.0 get_gpu_kernel_breakdown", size, [hta])))
            runs: dict[int, list] = {1: [], 2: []}
            baseline: list = []
            cmd = [*PERFLOOP, "analyze", str(trace), "--by", "kernel", "--json", "--top", "10"]
            for _ in range(args.repeats):
                for workers in runs:
                    runs[workers].append(measure(cmd, {"PERFLOOP_TRACE_WORKERS": str(workers)}))
                if args.baseline_src:
                    src = args.baseline_src.resolve()
                    baseline.append(measure(cmd, {"PYTHONPATH": str(src)}, cwd=src))
            if baseline:
                base = median(r[0] for r in baseline)
                note = ", ".join(
                    f"{w} worker(s) {base / median(r[0] for r in done):.1f}x faster "
                    f"(CPU {median(r[3] for r in baseline) / median(r[3] for r in done):.1f}x less)"
                    for w, done in runs.items()
                )
                agree = compare(top10(baseline[0][2]), top10(runs[2][0][2]))
                rows.append(
                    progress(
                        row(label, f"baseline tree ({args.baseline_src})", size, baseline, f"{agree}; {note}")
                    )
                )
            for workers, done in runs.items():
                median_wall = median(r[0] for r in done)
                note = compare(json.loads(hta[2]), top10(done[0][2])) if hta else ""
                if hta:
                    note += f"; HTA/perfloop: {hta[0] / median_wall:.1f}x time, {hta[1] / max(r[1] for r in done):.1f}x memory"
                rows.append(progress(row(label, f"perfloop analyze, {workers} worker(s)", size, done, note)))
            trace.unlink()
        if args.ranks_gb > 0:
            ranks = folder / "ranks"
            ranks.mkdir()
            for rank in range(args.ranks):
                write_trace(
                    ranks / f"rank{rank}.trace.json", int(args.ranks_gb * 1e9 / args.ranks), rank, args.ranks
                )
            size = sum(p.stat().st_size for p in ranks.iterdir())
            label = f"{size / 1e9:.2f} GB, {args.ranks} ranks"
            analyze = measure([*PERFLOOP, "analyze", str(ranks), "--by", "kernel", "--json", "--top", "10"])
            rows.append(progress(row(label, "perfloop analyze (merged ranks), 2 workers", size, [analyze])))
            diagnose = measure([*PERFLOOP, "diagnose", str(ranks), "--json"])
            found = [f["playbook"] for f in json.loads(diagnose[2])["findings"]][:3]
            rows.append(
                progress(
                    row(
                        label,
                        "perfloop diagnose (merged ranks), 2 workers",
                        size,
                        [diagnose],
                        f"findings: {found}",
                    )
                )
            )
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder)
    print(f"\nload average at the start: {load}, at the end: {os.getloadavg()}; {os.cpu_count()} CPUs\n")
    print("\n".join(notes) + "\n")
    print(
        "| trace | tool | wall s, median (range) | MB/s | CPU s | MB per CPU s | peak memory GB | "
        "agreement, ratios |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
