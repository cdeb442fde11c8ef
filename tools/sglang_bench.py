"""`python -m sglang.bench_serving` on the target host: the command, and its JSONL read into a Measurement.

Both are pure. bench_serving appends one JSON line per run to `--output-file`; with
`--output-details` the line also holds per-request `ttfts`/`itls` (seconds), `output_lens` and
`generated_texts`, which perfloop needs for TPOT spread and the output-equality gate.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from state.measure import Measurement, RequestRecord
from state.sglang import BenchServingRecord
from tools.bench import summarize
from tools.errors import ToolError

NEW_MODULE_FILE = "benchmark/serving.py"
"""Package-relative file of the benchmark's newer home, `sglang.benchmark.serving` (0.5.23 has it)."""


class BenchOutputError(ToolError):
    """bench_serving's output is missing, malformed or reports failed requests."""


def bench_module(has_new_module_file: bool) -> str:
    """`sglang.benchmark.serving` where the package has it, else `sglang.bench_serving` (pure)."""
    return "sglang.benchmark.serving" if has_new_module_file else "sglang.bench_serving"


def bench_serving_argv(python: str, module: str, base_url: str, model: str, num_prompts: int,
                       input_len: int, output_len: int, output_file: str) -> list[str]:
    """One sequential, streamed run on random prompts with per-request details (pure)."""
    return [python, "-m", module, "--backend", "sglang", "--base-url", base_url, "--model", model,
            "--dataset-name", "random", "--num-prompts", str(num_prompts),
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--random-range-ratio", "1", "--max-concurrency", "1", "--request-rate", "inf",
            "--output-file", output_file, "--output-details"]


def parse_bench_line(line: str) -> BenchServingRecord:
    """One JSONL line -> the fields perfloop reads (others ignored); BenchOutputError if unusable."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as err:
        raise BenchOutputError(f"bench_serving output line is not JSON ({err.msg} at column {err.colno})") from err
    if not isinstance(data, dict):
        raise BenchOutputError("bench_serving output line is not a JSON object; pass its --output-file")
    fields = {k: v for k, v in data.items() if k in BenchServingRecord.model_fields}
    try:
        return BenchServingRecord.model_validate(fields)
    except ValidationError as err:
        first = err.errors()[0]
        raise BenchOutputError(f"bench_serving output field `{'.'.join(map(str, first['loc']))}`: {first['msg']}"
                               " (is this a bench_serving --output-file line?)") from err


def _records(record: BenchServingRecord, n_prompts: int, errors: list) -> list[RequestRecord]:
    """Per-request records in dataset order; request i used prompt i % n_prompts."""
    n = len(record.ttfts)
    if not n or not (len(record.itls) == len(record.output_lens) == len(record.generated_texts) == n):
        raise BenchOutputError("bench_serving line has no (or uneven) per-request details; "
                               "rerun it with --output-details")
    for i, error in enumerate(errors):
        if error:
            raise BenchOutputError(f"bench_serving request {i} failed: {str(error).splitlines()[0][:200]}")
    return [RequestRecord(prompt_index=i % n_prompts, ttft_ms=record.ttfts[i] * 1000,
                          itl_ms=[x * 1000 for x in record.itls[i]], text=record.generated_texts[i],
                          completion_tokens=record.output_lens[i]) for i in range(n)]


def measurement_from_jsonl(text: str, label: str, tree_sha256: str, n_prompts: int) -> Measurement:
    """The last run in a bench_serving `--output-file` as perfloop's Measurement (pure)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise BenchOutputError("bench_serving wrote no result line; check its output for errors")
    record = parse_bench_line(lines[-1])
    errors = json.loads(lines[-1]).get("errors") or []
    requests = _records(record, n_prompts, errors)
    return summarize(label, tree_sha256, requests, min(n_prompts, len(requests)), record.duration)
