"""How long `perfloop` takes to answer: `--version`, `-h`, a command's `-h` and a config error on
an empty home; then the commands that read the store (`sessions`, `show last`, `replay last`,
`report last`, `export last`) on a home holding one imported recording (`--recording`, default
the interleaved session the README imports), each against its budget (issue 63: 1 s, `report` and
`export` 3 s). `replay last --again` runs the whole graph (a first replay: it keeps its states);
`replay last` after it reads that replay back (kept under the same sources, libraries and
recording, agent/sessions/reading/replayed.py), and each run is checked to have said which it did.
Then `show last` and `report last` on a home holding a session run here, with its checkpoints
(`perfloop run --approve auto --max-iterations 1` of tests/e2e's CPU demo target, about 25 s):
read from the checkpointer without the graph (agent/sessions/reading/direct.py).

Each command runs `--repeats` times (default 5) as its own process, the installed console script
(`.venv/bin/perfloop`, or `--perfloop PATH`), piped; the table gives the median and the slowest
wall time, whether the median is within the budget, and the heavy modules the command imported
(langgraph, torch, numpy, the whole loop state), read from a run under `python -X importtime`.
The load average (1 minute) before and after is printed with it: the machine may be shared.

    .venv/bin/python benchmarks/startup.py [--repeats N] [--perfloop PATH] [--recording FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("langgraph", "torch", "numpy", "state.sessions.loop", "git", "paramiko")
"""Modules that must not load before a command needs them (the names reported when they do)."""
RECORDING = ROOT / "benchmarks" / "h200-2026-11-30-interleaved" / "interleaved-session.json.gz"
"""The recording the README has a user import."""


def commands(bad_toml: Path) -> list[tuple[str, list[str], int, float | None]]:
    """(label, arguments, the exit status it must end with, budget s) of each start on an empty home."""
    return [
        ("--version", ["--version"], 0, None),
        ("-h", ["-h"], 0, None),
        ("run -h", ["run", "-h"], 0, None),
        ("sessions -h", ["sessions", "-h"], 0, None),
        ("run BAD.toml (config error)", ["run", str(bad_toml)], 2, None),
        ("calibrate BAD.toml (config error)", ["calibrate", str(bad_toml)], 2, None),
    ]


def store_commands(out: Path) -> list[tuple[str, list[str], int, float | None]]:
    """The same, on a home holding one imported recording (issue 63's budgets)."""
    return [
        ("-V", ["-V"], 0, 1.0),
        ("--help", ["--help"], 0, 1.0),
        ("sessions", ["sessions"], 0, 1.0),
        ("sessions --json", ["sessions", "--json"], 0, 1.0),
        ("show last", ["show", "last"], 0, 1.0),
        ("replay last --again (runs the graph)", ["replay", "last", "--again"], 0, None),
        ("replay last (2nd: read back)", ["replay", "last"], 0, 1.0),
        ("report last", ["report", "last", "-o", str(out / "r.html")], 0, 3.0),
        ("export last", ["export", "last", "-o", str(out / "e.json.gz")], 0, 3.0),
    ]


def checkpointed_commands(out: Path) -> list[tuple[str, list[str], int, float | None]]:
    """The same, on a home holding a session run here (its checkpoints read)."""
    return [
        ("show last", ["show", "last"], 0, 1.0),
        ("show last --json", ["show", "last", "--json"], 0, 1.0),
        ("report last", ["report", "last", "-o", str(out / "c.html")], 0, 3.0),
    ]


def run_here(perfloop: Path, tmp: Path, env: dict[str, str]) -> None:
    """One session of tests/e2e's CPU demo target run in `env`'s home, one iteration, approved."""
    sys.path.insert(0, str(ROOT))
    from tests.e2e.conftest import make_repo, write_target

    target = write_target(tmp / "demo.toml", make_repo(tmp / "engine"))
    argv = [str(perfloop), "run", str(target), "--approve", "auto", "--max-iterations", "1"]
    subprocess.run(argv, env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)


def measure(
    perfloop: Path, rows: list[tuple[str, list[str], int, float | None]], env: dict[str, str], repeats: int
) -> bool:
    """Time each row `repeats` times and print its line; whether every median met its budget."""
    python = str(perfloop.parent / "python")
    met = True
    for label, argv, status, budget in rows:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            done = subprocess.run([str(perfloop), *argv], capture_output=True, env=env, check=False)
            times.append(time.perf_counter() - start)
            if done.returncode != status:  # a start that failed otherwise is not the one timed
                sys.exit(f"perfloop {label} exited {done.returncode}, not {status}: {done.stderr[-500:]!r}")
            if argv[0] == "replay" and (b"read back;" in done.stderr) != ("--again" not in argv):
                sys.exit(f"perfloop {label} did not do what its label says: {done.stderr[-500:]!r}")
        heavy = ", ".join(imported(python, perfloop, argv, env)) or "none"
        median = statistics.median(times)
        within = "-" if budget is None else f"{'yes' if median <= budget else 'NO'} ({budget:g} s)"
        met &= budget is None or median <= budget
        print(f"{label:36} {median:9.2f} {max(times):7.2f} {within:>10}  {heavy}", flush=True)
    return met


def imported(python: str, script: Path, args: list[str], env: dict[str, str]) -> list[str]:
    """The heavy modules a run of `script args` imported (from `-X importtime`'s lines on stderr)."""
    done = subprocess.run(
        [python, "-X", "importtime", str(script), *args], capture_output=True, text=True, env=env, check=False
    )
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    return [h for h in HEAVY if h in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--perfloop", type=Path, default=ROOT / ".venv" / "bin" / "perfloop")
    parser.add_argument("--recording", type=Path, default=RECORDING)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "bad.toml"
        bad.write_text('name = "x"\nkind = "sglang"\nrepo = "."\nrepoo = 1\n', encoding="utf-8")
        env = {**os.environ, "PERFLOOP_HOME": str(Path(tmp) / "home"), "PERFLOOP_PROGRESS": "off"}
        env.pop("PERFLOOP_STORE", None)
        print(f"load average before: {os.getloadavg()[0]:.2f}; {args.repeats} runs each of {args.perfloop}")
        print(
            f"{'command (empty home)':36} {'median s':>9} {'max s':>7} {'budget':>10}  heavy modules imported"
        )
        measure(args.perfloop, commands(bad), env, args.repeats)
        stored = env | {"PERFLOOP_HOME": str(Path(tmp) / "stored")}
        subprocess.run(
            [str(args.perfloop), "import", str(args.recording)], env=stored, check=True, capture_output=True
        )
        print(f"{'command (' + args.recording.name + ')':36} {'median s':>9} {'max s':>7} {'budget':>10}")
        met = measure(args.perfloop, store_commands(Path(tmp)), stored, args.repeats)
        ran = env | {"PERFLOOP_HOME": str(Path(tmp) / "ran")}
        run_here(args.perfloop, Path(tmp), ran)
        print(f"{'command (a session run here)':36} {'median s':>9} {'max s':>7} {'budget':>10}")
        met &= measure(args.perfloop, checkpointed_commands(Path(tmp)), ran, args.repeats)
        print(f"load average after: {os.getloadavg()[0]:.2f}; every budget met: {'yes' if met else 'no'}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
