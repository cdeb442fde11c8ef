"""What the engines' own serving benchmarks share: finding the engine's package in the target's
interpreter without importing it, and running the benchmark once per repeat with the server
policy's environment, a time limit and a scrubbed log of a failed run (pure but for the two
runners). Each engine builds its own command and reads its own result files (tools/sglang/bench.py,
tools/vllm/bench.py).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from state.config.target import BenchServingConfig
from state.measurement.workload import WorkloadConfig
from tools.errors import ConfigError, ToolError
from tools.progress import report
from tools.secrets import child_env, kept_log, outside

IMPORT_TIMEOUT_S = 300.0
"""Allowance on top of the requests' own timeouts for importing the engine and loading a tokenizer."""

_PROBE = """\
import importlib.metadata as m, importlib.util as u, json
spec = u.find_spec({package!r})
version = ""
for dist in {dists!r}:
    try:
        version = m.version(dist)
        break
    except m.PackageNotFoundError:
        pass
print(json.dumps({{"dir": spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else "",
                  "version": version}}))
"""
"""Locates a package without importing it (an engine's `__init__` pulls in much of the engine)."""


@dataclass(frozen=True)
class BenchRun:
    """One measurement by an engine's benchmark: what every engine's client is given."""

    python: str
    """The interpreter that has the benchmark (on the target host)."""
    module: str
    """The benchmark's module, as the client's `find` named it."""
    cfg: BenchServingConfig
    """`measure.bench_serving`: backend, lengths, seed, tokenizer, environment."""
    base_url: str
    """The server's URL."""
    model: str
    """The served model's name."""
    num_prompts: int
    """Requests per run (under `[workload]` a window's)."""
    output_len: int
    """Tokens generated per request (without `[workload]`)."""
    repeats: int
    """Runs, each read as a repeat (a window under `[workload]`)."""
    warmup: int
    """Warm-up requests before the first run."""
    request_timeout_s: float
    """Seconds a request may take; a run may take that per request plus IMPORT_TIMEOUT_S."""
    repo: str
    """The checkout, substituted for `{repo}` in the tokenizer's path."""
    label: str
    """The measured arm, for progress lines."""
    workload: WorkloadConfig | None = None
    """The window's workload (one concurrency level), or None: one request at a time."""

    @property
    def timeout_s(self) -> float:
        """The time limit of one run."""
        return self.request_timeout_s * (self.num_prompts + self.warmup) + IMPORT_TIMEOUT_S


class BenchOutputError(ToolError):
    """The benchmark's output is missing, malformed or reports failed requests."""


def find_package(python: str, package: str, dists: tuple[str, ...], what: str) -> tuple[Path | None, str]:
    """(folder of `package`, or None; version of the first of `dists` installed, or "") in the
    interpreter `python`; ConfigError naming `what` was looked for when `python` cannot run."""
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE.format(package=package, dists=dists)],
            capture_output=True, text=True, timeout=60, env=child_env(os.environ, {}),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(
            f"cannot run {python!r} to look for {what}: {err}; check measure.bench_serving.python"
        ) from err
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"{python!r} failed looking for {what}: {outside(last)}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return (Path(found["dir"]) if found["dir"] else None), found["version"]


def run_each(
    what: str, r: BenchRun, env: Mapping[str, str], argv_of: Callable[[int, Path], list[str]]
) -> list[str]:
    """Run the benchmark `what` `r.repeats` times in a scratch folder, run k as `argv_of(k, file)`
    writing its result to `file`; the text of each result file ("" where none). BenchOutputError
    on a run past its time limit or failed (its whole output kept, scrubbed, under the home)."""
    texts, repeats, label, timeout_s = [], r.repeats, r.label, r.timeout_s
    with tempfile.TemporaryDirectory(prefix="perfloop-bench-") as tmp:
        for run in range(repeats):
            report(f"measuring {label} with {what}: run {run + 1}/{repeats}")
            path = Path(tmp) / f"run-{run}.json"
            argv = argv_of(run, path)
            try:
                proc = subprocess.run(
                    argv, cwd=tmp, env=dict(env), capture_output=True, text=True, timeout=timeout_s,
                    stdin=subprocess.DEVNULL,
                )  # fmt: skip
            except subprocess.TimeoutExpired as err:
                raise BenchOutputError(
                    f"{what} did not finish within {timeout_s:.0f}s "
                    f"(measure.request_timeout_s x requests + {IMPORT_TIMEOUT_S:.0f}s)"
                ) from err
            if proc.returncode != 0:
                last = outside((proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1])
                kept = kept_log(
                    "perfloop-bench", outside(f"$ {shlex.join(argv)}\n{proc.stdout}\n{proc.stderr}")
                )
                raise BenchOutputError(
                    f"{what} exited with status {proc.returncode}: {last[:300]} "
                    f"(its whole output: {kept} on the host)"
                )
            texts.append(path.read_text(encoding="utf-8") if path.is_file() else "")
    return texts
