"""Traces that cannot describe decode are refused in one line naming what is missing."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from tools.errors import TraceError
from tools.trace import read_chrome_trace, read_profiles

from .test_trace import TRACES

CUDA = TRACES / "full_pool_cast_cuda.json.gz"


def write(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def op(name: str, ts: float, dur: float, cat: str = "cpu_op", **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def test_zero_events(tmp_path: Path) -> None:
    doc: dict
    for doc in ({"traceEvents": []}, {"traceEvents": [], "deviceProperties": [{"name": "NVIDIA H200"}]}):
        path = write(tmp_path, "empty.json.gz", doc)
        with pytest.raises(TraceError, match="holds no events; the profiler was probably stopped"):
            read_chrome_trace(path)


def test_a_cuda_trace_without_kernels(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(CUDA.read_bytes()))
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    path = write(tmp_path, "nokernels.json.gz", doc)
    with pytest.raises(
        TraceError, match="a CUDA trace on NVIDIA H200 with no GPU kernels.*ProfilerActivity.CUDA"
    ):
        read_chrome_trace(path)


def test_a_cpu_trace_from_a_gpu_machine_is_read(tmp_path: Path) -> None:
    """A CPU server on a GPU machine: torch names the GPU in the trace, but nothing ran on it."""
    doc = {"traceEvents": [op("aten::mm", 0, 10)], "deviceProperties": [{"name": "NVIDIA H200"}]}
    summary = read_chrome_trace(write(tmp_path, "cpu.json.gz", doc))
    assert summary.time_basis == "cpu" and [o.name for o in summary.ops] == ["aten::mm"]


def test_no_decode_steps_is_not_refused(tmp_path: Path) -> None:
    """Too little to find steps in: the whole trace is one step (or the --steps given), bounds unknown."""
    events = [op("aten::mm", 0, 10), op("aten::add", 20, 5)]
    path = write(tmp_path, "nosteps.json.gz", {"traceEvents": events})
    summary = read_profiles([path])
    assert summary.steps == 1 and summary.step_source is None and summary.ops
    assert read_profiles([path], 4).steps == 4
    stepped = write(
        tmp_path, "steps.json.gz", {"traceEvents": [*events, op("ProfilerStep#1", 0, 30, "user_annotation")]}
    )
    assert read_profiles([stepped]).steps == 1 and read_profiles([stepped]).step_source == "ProfilerStep"


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    empty = write(tmp_path, "empty.json.gz", {"traceEvents": []})
    for args, needle in (
        (["analyze", str(empty)], "holds no events"),
        (["diagnose", str(empty)], "holds no events"),
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    nosteps = write(tmp_path, "nosteps.json.gz", {"traceEvents": [op("aten::mm", 0, 10)]})
    result = CliRunner().invoke(app, ["diagnose", str(nosteps)])
    assert result.exit_code == 0 and "steps: unknown" in result.output
