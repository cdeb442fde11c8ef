"""perfloop's trace analysis against HolisticTraceAnalysis (HTA) on one large trace and on the
eight rank traces of a tensor-parallel server, in one run.

Writes into a temporary folder (deleted afterwards unless --keep) one plain-JSON trace of --size-mb
and a set of --ranks traces of --rank-size-mb each. --shape h200 (the default) tiles a real H200
trace (`h200_traces.py`: the glm5 demo's eager trace, every field Kineto wrote, copies shifted in
time with their ids renumbered); the rank set adds an NCCL all-reduce every 24 kernels on each rank
and makes one rank's kernels 15% slower, so that the others wait for it. --shape kineto writes the
synthetic MLA step of `kineto_trace.py` instead. Then:
  * HTA: TraceAnalysis(...).get_gpu_kernel_breakdown(duration_ratio=1.0, num_kernels=10), with
    HTA_DISABLE_NS_ROUNDING=1 (by default HTA trims every event to whole microseconds, which moves
    the shares of short kernels by several points), once on the single trace; with --hta-ranks on
    the rank set too (HTA then holds every rank in memory at once: ~4 GB per 640 MB rank);
  * perfloop: `perfloop analyze TRACE --by kernel --json --top 10` with PERFLOOP_TRACE_WORKERS=1
    and =2 (--workers; and --baseline-src, another source tree), alternated --repeats times; and
    `perfloop analyze RANKS_DIR --by kernel --json --top 10` (each rank's table, the slowest rank,
    each rank's wait in collectives), --repeats times.
Each command runs in its own process tree: wall time from here, peak memory as the largest sum of
the Pss of the whole tree (parent and workers), sampled every 100 ms (the tree found again every
0.5 s), the 1-minute load average before and after it (the machine is shared: MB per CPU second
does not depend on the load). Rows give MB/s (uncompressed bytes / median wall time), CPU seconds
of the tree, the ratios to HTA in the same run, and whether the top-10 kernels and their shares
agree with HTA within 0.5 percentage points.

Usage: python benchmarks/trace_analysis_vs_hta.py [--size-mb 640] [--ranks 8] [--rank-size-mb 640]
       [--repeats 3] [--workers 1,2] [--hta-python PY] [--hta-ranks] [--shape h200|kineto] [--keep]
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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from statistics import median

import h200_traces
import kineto_trace

ROOT = Path(__file__).resolve().parents[1]
HTA_RUNNER = """
import json, os, sys
os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"  # keep ns durations (HTA rounds each event to whole us)
from hta.trace_analysis import TraceAnalysis
files = dict(enumerate(sys.argv[1:]))
a = TraceAnalysis(trace_files=files, trace_dir="", include_last_profiler_step=True)
types, kernels = a.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10)
comp = kernels[kernels["kernel_type"] == "COMPUTATION"]
if "rank" in comp:
    comp = comp[comp["rank"] == 0]
total = float(comp["sum (us)"].sum())
rows = comp[comp["name"] != "others"].sort_values("sum (us)", ascending=False).head(10)
print(json.dumps([[n, float(s) / total] for n, s in zip(rows["name"], rows["sum (us)"])]))
"""
PERFLOOP = [sys.executable, "-c", "import agent.cli as cli; (getattr(cli, 'main', None) or cli.app)()"]
Run = tuple[float, float, str, float, str]
"""wall s, peak GB, last stdout line, CPU s, load average before -> after."""


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (a scan of all of /proc: done twice a second, not at every
    sample, so that the sampler takes little of the CPU the measured command runs on)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _pss_kb(pids: list[int]) -> int:
    """Summed proportional set size (Pss: a page shared by n processes counts 1/n in each, so forked
    workers' shared pages count once) of the processes (0 for those gone meanwhile)."""
    total = 0
    for p in pids:
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total


def measure(argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> Run:
    """(wall s, peak memory (Pss) of the process tree in GB, last stdout line, CPU s of the tree:
    user + system of the command and the workers it waited for, 1-minute load before -> after)."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd, env={**os.environ, **(env or {})})
        peak, pids, rescan = 0, [proc.pid], 0.0
        while proc.poll() is None:
            if time.perf_counter() >= rescan:
                pids, rescan = _descendants(proc.pid), time.perf_counter() + 0.5
            peak = max(peak, _pss_kb(pids))
            try:  # not a sleep: the wall time ends when the command does, not at the next sample
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        wall = time.perf_counter() - start
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        sys.exit(f"{argv[:3]} failed (exit {proc.returncode}): {stderr.strip()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    return wall, peak / 1e6, last, cpu, f"{load:.1f}->{os.getloadavg()[0]:.1f}"


def _cores() -> int:
    """The cores perfloop's default (PERFLOOP_TRACE_WORKERS unset) uses: those this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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


def row(trace: str, tool: str, size: int, runs: list[Run], note: str = "") -> str:
    """One table row: median wall time (range), MB/s of the median, CPU seconds (median) and MB per
    CPU second, peak memory (largest), the load average around each run."""
    walls = sorted(r[0] for r in runs)
    spread = f" ({walls[0]:.1f}-{walls[-1]:.1f})" if len(walls) > 1 else ""
    cpu = median(r[3] for r in runs)
    peak = max(r[1] for r in runs)
    return (
        f"| {trace} | {tool} | {median(walls):.2f}{spread} | {size / 1e6 / median(walls):.0f} | "
        f"{cpu:.1f} | {size / 1e6 / cpu:.0f} | {peak:.2f} | {', '.join(r[4] for r in runs)} | {note} |"
    )


def make(path: Path, size: int, shape: str, rank: int = 0, world: int = 1) -> str:
    """Write one trace; what it holds, in words."""
    if shape == "kineto":
        steps = kineto_trace.write_trace(path, size, rank, world)
        return f"{steps} synthetic decode steps of {kineto_trace.LAYERS} layers"
    copies = h200_traces.tile(path, size, rank, world)
    return f"{copies} copies of {h200_traces.SOURCE.name} (5 ProfilerSteps each)"


def single(
    args: argparse.Namespace, folder: Path, has_hta: bool, notes: list[str]
) -> tuple[list[str], Run | None]:
    """HTA once, then perfloop with one and two workers alternated, on one trace; HTA's run."""
    trace = folder / "single.trace.json"
    what = make(trace, int(args.size_mb * 1e6), args.shape)
    size = trace.stat().st_size
    label = f"{size / 1e6:.0f} MB, 1 file"
    notes.append(f"{label}: {what}")
    rows, hta = [], None
    if has_hta:
        hta = measure([args.hta_python, "-c", HTA_RUNNER, str(trace)])
        rows.append(progress(row(label, "HTA 0.5.0 get_gpu_kernel_breakdown", size, [hta])))
    runs: dict[int, list[Run]] = {w: [] for w in args.workers}
    baseline: list[Run] = []
    cmd = [*PERFLOOP, "analyze", str(trace), "--by", "kernel", "--json", "--top", "10"]
    for _ in range(args.repeats):
        for workers in runs:
            runs[workers].append(measure(cmd, {"PERFLOOP_TRACE_WORKERS": str(workers)}))
        if args.baseline_src:
            src = args.baseline_src.resolve()
            baseline.append(measure(cmd, {"PYTHONPATH": str(src)}, cwd=src))
    if baseline:
        note = compare(top10(baseline[0][2]), top10(runs[2][0][2]))
        rows.append(progress(row(label, f"baseline tree ({args.baseline_src})", size, baseline, note)))
    for workers, done in runs.items():
        note = compare(json.loads(hta[2]), top10(done[0][2])) if hta else ""
        if hta:
            wall = median(r[0] for r in done)
            note += (
                f"; HTA/perfloop: {hta[0] / wall:.1f}x time, {hta[1] / max(r[1] for r in done):.1f}x memory"
            )
        rows.append(progress(row(label, f"perfloop analyze, {workers} worker(s)", size, done, note)))
    if not args.keep:
        trace.unlink()
    return rows, hta


def ranks(
    args: argparse.Namespace, folder: Path, has_hta: bool, hta_one: Run | None, notes: list[str]
) -> list[str]:
    """perfloop (and with --hta-ranks HTA) on the rank set, against HTA's time on one trace."""
    where = folder / "ranks"
    where.mkdir()
    with ProcessPoolExecutor() as pool:  # one rank file per core: the writing is Python, one core each
        made = [
            pool.submit(
                make,
                where / f"server-TP-{r}.trace.json",
                int(args.rank_size_mb * 1e6),
                args.shape,
                r,
                args.ranks,
            )
            for r in range(args.ranks)
        ]
        what = [m.result() for m in made][-1]
    files = sorted(where.iterdir())
    size = sum(p.stat().st_size for p in files)
    label = f"{size / 1e6:.0f} MB, {args.ranks} ranks"
    slow = min(h200_traces.SLOW_RANK, args.ranks - 1)
    notes.append(
        f"{label}: each {what}"
        + (
            f"; rank {slow}'s kernels {h200_traces.SLOW_FACTOR - 1:.0%} longer"
            if args.shape == "h200"
            else ""
        )
    )
    rows = []
    if has_hta and args.hta_ranks:
        hta = measure([args.hta_python, "-c", HTA_RUNNER, *map(str, files)])
        rows.append(progress(row(label, "HTA 0.5.0 get_gpu_kernel_breakdown (all ranks)", size, [hta])))
    cmd = [*PERFLOOP, "analyze", str(where), "--by", "kernel", "--json", "--top", "10"]
    done = [measure(cmd) for _ in range(args.repeats)]
    doc = json.loads(done[0][2])
    slow = doc["slowest_rank"]
    waits = ", ".join(f"{t['collective_wait_us_per_step'] / 1e3:.2f}" for t in doc["rank_tables"])
    note = f"slowest rank {slow['rank']}; wait in collectives per rank, ms/step: {waits}"
    if hta_one:
        note += f"; HTA on ONE of these traces took {hta_one[0] / median(r[0] for r in done):.1f}x this time"
    rows.append(
        progress(
            row(label, f"perfloop analyze RANKS_DIR (per-rank tables), {_cores()} workers", size, done, note)
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=640, help="Size of the single trace (0: none).")
    parser.add_argument("--ranks", type=int, default=8, help="Rank traces in the set (0: none).")
    parser.add_argument("--rank-size-mb", type=float, default=640, help="Size of each rank's trace.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs of each perfloop variant.")
    parser.add_argument(
        "--workers",
        type=lambda text: [int(w) for w in text.split(",")],
        default=[1, 2],
        help="PERFLOOP_TRACE_WORKERS values for the single trace, comma-separated (default 1,2).",
    )
    parser.add_argument("--hta-python", default=sys.executable, help="Interpreter with HTA installed.")
    parser.add_argument("--hta-ranks", action="store_true", help="Run HTA on the rank set too.")
    parser.add_argument("--shape", choices=("h200", "kineto"), default="h200", help="What the traces hold.")
    parser.add_argument("--keep", action="store_true", help="Keep the traces' temporary folder.")
    parser.add_argument(
        "--baseline-src", type=Path, help="Another perfloop source tree, run beside on the single trace."
    )
    args = parser.parse_args()
    try:
        has_hta = subprocess.run([args.hta_python, "-c", "import hta"], capture_output=True).returncode == 0
    except OSError:
        has_hta = False
    if not has_hta:
        print(f"HTA is not importable by {args.hta_python}: HTA rows left out", file=sys.stderr)
    start = Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="trace-bench-"))
    rows: list[str] = []
    notes: list[str] = []
    hta_one = None
    try:
        if args.size_mb > 0:
            done, hta_one = single(args, folder, has_hta, notes)
            rows += done
        if args.ranks > 0:
            rows += ranks(args, folder, has_hta, hta_one, notes)
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder)
    end = Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else os.getloadavg()
    print(f"\n/proc/loadavg at the start: {start}; at the end: {end}; {os.cpu_count()} CPUs\n")
    print("\n".join(notes) + "\n")
    print(
        "| trace | tool | wall s, median (range) | MB/s | CPU s | MB per CPU s | peak memory GB | "
        "load (1 min) before->after each run | agreement, ratios |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
