"""The per-request result both engines' serving benchmarks write (pure): sglang.bench_serving's
`--output-file` line with `--output-details`, and `vllm bench serve`'s `--save-detailed` file (one
JSON document, made one line): `ttfts`, `itls` (seconds), `output_lens`, `generated_texts`,
`errors`, `duration`, read as perfloop's per-request records.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from state.engines.sglang import BenchServingRecord
from state.measurement.measure import RequestRecord
from tools.engines.benchrun import BenchOutputError


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
