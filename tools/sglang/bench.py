"""`python -m sglang.bench_serving` on the target host: finding it, running it, reading its JSONL.

bench_serving appends one JSON line per run to `--output-file`; with `--output-details` the line
also holds per-request `ttfts`/`itls` (seconds), `output_lens` and `generated_texts`, which perfloop
needs for TPOT spread and the output-equality gate. Everything here but `find_bench` and
`run_bench` is pure; those two run on the host (the measure tool runs there).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from pydantic import ValidationError

from state.measure import RequestRecord
from state.sglang import BenchServingRecord
from state.target import BenchServingConfig
from state.workload import WorkloadConfig
from tools.errors import ConfigError, ToolError
from tools.progress import report
from tools.secrets import child_env, kept_log, outside, server_env

NEW_MODULE_FILE = "benchmark/serving.py"
"""Package-relative file of the benchmark's newer home, `sglang.benchmark.serving` (0.5.23 has it)."""
OLD_MODULE_FILE = "bench_serving.py"
"""Package-relative file of `sglang.bench_serving` (every 0.5.x; a shim to the new home in 0.5.23)."""
IMPORT_TIMEOUT_S = 300.0
"""Allowance on top of the requests' own timeouts for importing sglang and loading a tokenizer."""

_PROBE = """\
import importlib.metadata as m, importlib.util as u, json
spec = u.find_spec("sglang")
try:
    version = m.version("sglang")
except m.PackageNotFoundError:
    version = ""
print(json.dumps({"dir": spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else "",
                  "version": version}))
"""
"""Locates the sglang package without importing it (its `__init__` pulls in much of the engine)."""


class BenchOutputError(ToolError):
    """bench_serving's output is missing, malformed or reports failed requests."""


def bench_module(has_new_module_file: bool) -> str:
    """`sglang.benchmark.serving` where the package has it, else `sglang.bench_serving` (pure)."""
    return "sglang.benchmark.serving" if has_new_module_file else "sglang.bench_serving"


def find_bench(python: str) -> tuple[str, str] | None:
    """(module, sglang version) of the benchmark in `python`'s sglang, or None without one."""
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=60, env=child_env(os.environ, {})
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(
            f"cannot run {python!r} to look for sglang's bench_serving: {err}; "
            "check measure.bench_serving.python"
        ) from err
    if proc.returncode != 0:
        raise ConfigError(
            f"{python!r} failed looking for sglang's bench_serving: "
            f"{outside((proc.stderr.strip().splitlines() or ['no output'])[-1])}"
        )
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    package = Path(found["dir"]) if found["dir"] else None
    if package is None or not (
        (package / NEW_MODULE_FILE).is_file() or (package / OLD_MODULE_FILE).is_file()
    ):
        return None
    version = found["version"] or "unknown"
    return bench_module((package / NEW_MODULE_FILE).is_file()), version


def bench_serving_argv(
    python: str,
    module: str,
    cfg: BenchServingConfig,
    base_url: str,
    model: str,
    num_prompts: int,
    output_len: int,
    warmup: int,
    output_file: str,
    repo: str,
    workload: WorkloadConfig | None = None,
) -> list[str]:
    """One streamed run of the seeded `random-ids` prompts with per-request details (pure):
    sequential, or under `[workload]` one window at its concurrency.

    `random-ids` needs no dataset download (`random` fetches ShareGPT); a range ratio of 1 gives
    every prompt exactly `input_len` tokens and every request `output_len` (EOS ignored). Under
    `[workload]` its lengths are drawn in [ratio x high, high], one ratio for both (bench_serving's
    `--random-range-ratio`)."""
    concurrency, input_len, ratio = 1, cfg.input_len, 1.0
    if workload is not None:
        concurrency, input_len, output_len = (
            workload.primary,
            workload.input_len[1],
            workload.output_len[1],
        )
        ratio = bench_range_ratio(workload)
    argv = [
        python,
        "-m",
        module,
        "--backend",
        cfg.backend,
        "--base-url",
        base_url,
        "--model",
        model,
        "--dataset-name",
        "random-ids",
        "--num-prompts",
        str(num_prompts),
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        f"{ratio:g}",
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        f"{workload.request_rate:g}" if workload is not None and workload.request_rate is not None else "inf",
        "--seed",
        str(cfg.seed),
        "--warmup-requests",
        str(warmup),
        "--disable-tqdm",
    ]
    if cfg.tokenizer:
        argv += ["--tokenizer", cfg.tokenizer.replace("{repo}", repo)]
    return [*argv, "--output-file", output_file, "--output-details"]


def bench_range_ratio(w: WorkloadConfig) -> float:
    """bench_serving's one `--random-range-ratio` for the workload's input and output lengths
    (pure); ConfigError where they need two, or where a window is a duration."""
    if w.duration_s is not None:
        raise ConfigError(
            "sglang.bench_serving measures windows of a request count: set [workload] requests "
            'instead of duration_s, or measure.bench_serving.use = "never"'
        )
    ratio = w.input_len[0] / w.input_len[1]
    if max(int(w.output_len[1] * ratio), 1) != w.output_len[0]:
        raise ConfigError(
            f"sglang.bench_serving draws input and output lengths with one range ratio: [workload] "
            f"input_len {w.input_len} has {ratio:g}, so output_len must be "
            f"[{max(int(w.output_len[1] * ratio), 1)}, {w.output_len[1]}] "
            '(or set measure.bench_serving.use = "never")'
        )
    return ratio


def parse_bench_line(line: str) -> BenchServingRecord:
    """One JSONL line -> the fields perfloop reads (others ignored); BenchOutputError if unusable."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as err:
        raise BenchOutputError(
            f"bench_serving output line is not JSON ({err.msg} at column {err.colno})"
        ) from err
    if not isinstance(data, dict):
        raise BenchOutputError("bench_serving output line is not a JSON object; pass its --output-file")
    fields = {k: v for k, v in data.items() if k in BenchServingRecord.model_fields}
    try:
        return BenchServingRecord.model_validate(fields)
    except ValidationError as err:
        first = err.errors()[0]
        raise BenchOutputError(
            f"bench_serving output field `{'.'.join(map(str, first['loc']))}`: {first['msg']}"
            " (is this a bench_serving --output-file line?)"
        ) from err


def _records(line: str) -> tuple[list[RequestRecord], float]:
    """Per-request records of one run, in dataset order (request i used prompt i), and its duration."""
    record = parse_bench_line(line)
    n = len(record.ttfts)
    if not n or not (len(record.itls) == len(record.output_lens) == len(record.generated_texts) == n):
        raise BenchOutputError(
            "bench_serving line has no (or uneven) per-request details; rerun it with --output-details"
        )
    for i, error in enumerate(record.errors):
        if error:
            raise BenchOutputError(f"bench_serving request {i} failed: {str(error).splitlines()[0][:200]}")
    return [
        RequestRecord(
            prompt_index=i,
            ttft_ms=record.ttfts[i] * 1000,
            itl_ms=[x * 1000 for x in record.itls[i]],
            text=record.generated_texts[i],
            completion_tokens=record.output_lens[i],
        )
        for i in range(n)
    ], record.duration


def runs_from_jsonl(text: str) -> list[tuple[list[RequestRecord], float]]:
    """Each run in a bench_serving `--output-file`: its requests and its duration (pure).

    Runs of the same seeded dataset send the same prompts, so request i of each run is prompt i."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise BenchOutputError("bench_serving wrote no result line; check its output for errors")
    return [_records(line) for line in lines]


def records_from_jsonl(text: str) -> tuple[list[RequestRecord], float]:
    """Every run in a bench_serving `--output-file`: all requests, and the runs' total duration (pure)."""
    runs = runs_from_jsonl(text)
    return [r for run, _ in runs for r in run], sum(seconds for _, seconds in runs)


def run_bench(
    python: str,
    module: str,
    cfg: BenchServingConfig,
    base_url: str,
    model: str,
    num_prompts: int,
    output_len: int,
    repeats: int,
    warmup: int,
    request_timeout_s: float,
    repo: str,
    label: str,
    workload: WorkloadConfig | None = None,
) -> list[tuple[list[RequestRecord], float]]:
    """Run bench_serving `repeats` times (warm-up before the first) into one JSONL file; read each
    run (under `[workload]` a window) back."""
    env = server_env(os.environ, cfg.env, cfg.pass_env)  # it imports the patched checkout
    timeout_s = request_timeout_s * (num_prompts + warmup) + IMPORT_TIMEOUT_S
    with tempfile.TemporaryDirectory(prefix="perfloop-bench-") as tmp:
        out = Path(tmp) / "bench.jsonl"
        for run in range(repeats):
            report(f"measuring {label} with {module}: run {run + 1}/{repeats}")
            argv = bench_serving_argv(
                python,
                module,
                cfg,
                base_url,
                model,
                num_prompts,
                output_len,
                warmup if run == 0 else 0,
                str(out),
                repo,
                workload,
            )
            try:
                proc = subprocess.run(
                    argv,
                    cwd=tmp,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired as err:
                raise BenchOutputError(
                    f"{module} did not finish within {timeout_s:.0f}s "
                    f"(measure.request_timeout_s x requests + {IMPORT_TIMEOUT_S:.0f}s)"
                ) from err
            if proc.returncode != 0:
                last = outside((proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1])
                kept = kept_log(
                    "perfloop-bench", outside(f"$ {shlex.join(argv)}\n{proc.stdout}\n{proc.stderr}")
                )
                raise BenchOutputError(
                    f"{module} exited with status {proc.returncode}: {last[:300]} "
                    f"(its whole output: {kept} on the host)"
                )
        return runs_from_jsonl(out.read_text(encoding="utf-8") if out.exists() else "")
