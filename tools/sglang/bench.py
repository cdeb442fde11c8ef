"""`python -m sglang.bench_serving` on the target host: finding it, running it, reading its JSONL.

bench_serving appends one JSON line per run to `--output-file`; with `--output-details` the line
also holds per-request `ttfts`/`itls` (seconds), `output_lens` and `generated_texts`, which perfloop
needs for TPOT spread and the output-equality gate (read by tools/engines/records.py). Everything here but `find_bench` and
`run_bench` is pure; those two run on the host (the measure tool runs there).
"""

from __future__ import annotations

import os

from state.measurement.measure import RequestRecord
from state.measurement.workload import WorkloadConfig
from tools.engines.benchrun import BenchRun, find_package, run_each
from tools.engines.records import runs_from_jsonl
from tools.errors import ConfigError
from tools.secrets import server_env

NEW_MODULE_FILE = "benchmark/serving.py"
"""Package-relative file of the benchmark's newer home, `sglang.benchmark.serving` (0.5.23 has it)."""
OLD_MODULE_FILE = "bench_serving.py"
"""Package-relative file of `sglang.bench_serving` (every 0.5.x; a shim to the new home in 0.5.23)."""


def bench_module(has_new_module_file: bool) -> str:
    """`sglang.benchmark.serving` where the package has it, else `sglang.bench_serving` (pure)."""
    return "sglang.benchmark.serving" if has_new_module_file else "sglang.bench_serving"


def find_bench(python: str) -> tuple[str, str] | None:
    """(module, sglang version) of the benchmark in `python`'s sglang, or None without one."""
    package, version = find_package(python, "sglang", ("sglang",), "sglang's bench_serving")
    if package is None or not (
        (package / NEW_MODULE_FILE).is_file() or (package / OLD_MODULE_FILE).is_file()
    ):
        return None
    return bench_module((package / NEW_MODULE_FILE).is_file()), version or "unknown"


def bench_serving_argv(r: BenchRun, warmup: int, output_file: str) -> list[str]:
    """One streamed run of the seeded `random-ids` prompts with per-request details (pure):
    sequential, or under `[workload]` one window at its concurrency.

    `random-ids` needs no dataset download (`random` fetches ShareGPT); a range ratio of 1 gives
    every prompt exactly `input_len` tokens and every request `output_len` (EOS ignored). Under
    `[workload]` its lengths are drawn in [ratio x high, high], one ratio for both (bench_serving's
    `--random-range-ratio`)."""
    cfg, workload, output_len = r.cfg, r.workload, r.output_len
    concurrency, input_len, ratio = 1, cfg.input_len, 1.0
    if workload is not None:
        concurrency, input_len, output_len = (
            workload.primary,
            workload.input_len[1],
            workload.output_len[1],
        )
        ratio = bench_range_ratio(workload)
    argv = [
        r.python,
        "-m",
        r.module,
        "--backend",
        cfg.backend,
        "--base-url",
        r.base_url,
        "--model",
        r.model,
        "--dataset-name",
        "random-ids",
        "--num-prompts",
        str(r.num_prompts),
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
        argv += ["--tokenizer", cfg.tokenizer.replace("{repo}", r.repo)]
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


def window_requests(w: WorkloadConfig) -> int:
    """bench_serving's request count of a `[workload]` window; ConfigError where it cannot draw
    the workload (bench_range_ratio) (pure)."""
    bench_range_ratio(w)
    assert w.requests is not None  # bench_range_ratio refused a duration
    return w.requests


def run_bench(r: BenchRun) -> list[tuple[list[RequestRecord], float]]:
    """Run bench_serving `repeats` times (warm-up before the first), each into a JSONL file of its
    own; read each run (under `[workload]` a window) back."""
    env = server_env(os.environ, r.cfg.env, r.cfg.pass_env)  # it imports the patched checkout
    texts = run_each(
        r.module, r, env, lambda k, out: bench_serving_argv(r, r.warmup if k == 0 else 0, str(out))
    )
    return runs_from_jsonl("\n".join(texts))
