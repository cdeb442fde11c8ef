"""How long `perfloop` takes to start: `--version`, `-h`, a command's `-h` and a config error.

Each command runs `--repeats` times (default 5) as its own process, the installed console script
(`.venv/bin/perfloop`, or `--perfloop PATH`), with a fresh `PERFLOOP_HOME` so no store is read;
the table gives the median and the slowest wall time, and the heavy modules the command imported
(langgraph, torch, numpy, the whole loop state), read from a run under `python -X importtime`.
The 1-minute load average before and after is printed with it: the machine may be shared.

    .venv/bin/python benchmarks/startup.py [--repeats N] [--perfloop PATH]
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


def commands(bad_toml: Path) -> list[tuple[str, list[str], int]]:
    """(label, arguments, the exit status it must end with) of each measured start."""
    return [
        ("--version", ["--version"], 0),
        ("-h", ["-h"], 0),
        ("run -h", ["run", "-h"], 0),
        ("sessions -h", ["sessions", "-h"], 0),
        ("run BAD.toml (config error)", ["run", str(bad_toml)], 2),
        ("calibrate BAD.toml (config error)", ["calibrate", str(bad_toml)], 2),
    ]


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
    args = parser.parse_args()
    python = str(args.perfloop.parent / "python")
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "bad.toml"
        bad.write_text('name = "x"\nkind = "sglang"\nrepo = "."\nrepoo = 1\n', encoding="utf-8")
        env = {**os.environ, "PERFLOOP_HOME": str(Path(tmp) / "home"), "PERFLOOP_PROGRESS": "off"}
        env.pop("PERFLOOP_STORE", None)
        print(f"load average before: {os.getloadavg()[0]:.2f}; {args.repeats} runs each of {args.perfloop}")
        print(f"{'command':36} {'median s':>9} {'max s':>7}  heavy modules imported")
        for label, argv, status in commands(bad):
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                done = subprocess.run([str(args.perfloop), *argv], capture_output=True, env=env, check=False)
                times.append(time.perf_counter() - start)
                if done.returncode != status:  # a start that failed otherwise is not the one timed
                    sys.exit(
                        f"perfloop {label} exited {done.returncode}, not {status}: {done.stderr[-500:]!r}"
                    )
            heavy = ", ".join(imported(python, args.perfloop, argv, env)) or "none"
            print(f"{label:36} {statistics.median(times):9.2f} {max(times):7.2f}  {heavy}")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
