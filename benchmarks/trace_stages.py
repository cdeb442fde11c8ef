"""Where the time of one `perfloop analyze` goes, stage by stage, in the process that runs it.

    python benchmarks/trace_stages.py TRACE [--repeats 3] [-- more analyze flags]

Runs `perfloop analyze TRACE --by kernel --json --top 10` (`main()`, as the `perfloop` script does)
in a fresh interpreter --repeats times and prints, per run, the seconds from the interpreter's start
to the end of the imports, the byte ranges cut, both halves' columns collected (the parent's own
range and the workers'), the merge, the host events in walk order (nested, what each inherits),
the rest of the summary, and the end. The stages are found by wrapping the functions that run them.
"""

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import atexit, sys, time
T0 = time.perf_counter()
import tools.trace.ranks.parallel as parallel
marks = {"imports": (0.0, time.perf_counter() - T0)}
def wrap(mod, name, label):
    fn = getattr(mod, name)
    def timed(*a, **k):
        t = time.perf_counter() - T0
        out = fn(*a, **k)
        marks.setdefault(label, (t, time.perf_counter() - T0))
        return out
    setattr(mod, name, timed)
wrap(parallel, "byte_ranges", "cut")
wrap(parallel, "_collect_ranges", "collect")
wrap(parallel, "merge_collected", "merge")
import tools.trace.analyses.walk as walk
wrap(walk, "host_events", "host events")
wrap(parallel, "summarize_trace", "summary")
def report():
    line = ", ".join(f"{k} {b - a:.3f}" for k, (a, b) in marks.items())
    print(f"{line}; end {time.perf_counter() - T0:.3f}", file=sys.stderr)
atexit.register(report)
sys.argv = ["perfloop", "analyze", *sys.argv[1:]]
from agent.cli import main
main()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("more", nargs="*", help="more `perfloop analyze` flags (after --)")
    args = parser.parse_args()
    argv = [args.trace, "--by", "kernel", "--json", "--top", "10", *args.more]
    for _ in range(args.repeats):
        done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            sys.exit(done.stderr.strip()[-800:])
        print(done.stderr.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
