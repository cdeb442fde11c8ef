"""Bounded memory, measured: a process reading a trace several times larger than the bound.

The traces are generated here: cpu_ops with their input dims, each launching a kernel, every event
carrying a long call stack the analysis skips, so the file is large while what the analysis keeps
is small. A child process reads a trace a tenth the size first (lazy imports, decoders, chunk
buffers: the fixed cost), notes its peak resident memory (VmHWM), then reads the large one twice
(plain and gzip); the peak may grow by at most BOUND_BYTES, which the file exceeds several times.
Reading the file whole (or keeping every event) would grow it by more than the file's size.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOUND_BYTES = 32 << 20
"""Peak growth allowed past a trace of a tenth the size: the columns of the extra events, no more."""
STEPS = 40_000
STACK = ";".join(f"model.py({i}): layer_{i}" for i in range(130))  # ~3 KB, never decoded

READER = """
import json, re, sys
from tools.trace import read_chrome_trace

def hwm():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) << 10

read_chrome_trace(sys.argv[1])  # warm: lazy imports, decoders, the chunk buffers
base = hwm()
for _ in range(2):
    summary = read_chrome_trace(sys.argv[2])
top = summary.ops[0]
print(json.dumps({"base": base, "peak": hwm(), "op": top.name, "calls": top.calls}))
"""


def write_trace(path: Path, steps: int) -> int:
    """`steps` cpu_ops each launching a kernel, in ProfilerSteps of 1000; returns the uncompressed size."""
    host, dev = '"pid": 1, "tid": 1', '"pid": 0, "tid": 7'
    size = 0
    with gzip.open(path, "wt", compresslevel=1) if path.suffix == ".gz" else open(path, "w") as f:
        f.write('{"deviceProperties": [{"name": "CPU"}], "traceEvents": [\n')
        for start in range(0, steps, 1000):
            step = start // 1000
            rows = [
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", '
                f'"ts": {start * 100.0}, "dur": {1000 * 100.0 - 10}, {host}}}'
            ]
            for i in range(start, start + 1000):
                ts = i * 100.0
                rows.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": {ts + 1}, "dur": 50.0, {host}, '
                    f'"args": {{"Input Dims": [[65536, 1, 576], [65536, 1, 576], []], '
                    f'"Input type": ["c10::BFloat16", "c10::Float8_e4m3fn", "Scalar"], '
                    f'"correlation": {i}, "Call stack": "{STACK}"}}}}, '
                    f'{{"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "ts": {ts + 5}, "dur": 40.0, '
                    f'{dev}, "args": {{"correlation": {i}, "device": 0, "Call stack": "{STACK}"}}}}'
                )
            text = ",\n".join(rows) + (",\n" if start + 1000 < steps else "\n")
            size += len(text)
            f.write(text)
        f.write("]}\n")
    return size


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_reading_a_large_trace_stays_within_the_memory_bound(tmp_path: Path, suffix: str) -> None:
    small, big = tmp_path / f"small{suffix}", tmp_path / f"big{suffix}"
    write_trace(small, STEPS // 10)
    size = write_trace(big, STEPS)
    assert size > 6 * BOUND_BYTES
    done = subprocess.run(
        [sys.executable, "-c", READER, str(small), str(big)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert (got["op"], got["calls"]) == ("elementwise_kernel", STEPS)  # the kernels: all of it was read
    growth = got["peak"] - got["base"]
    assert growth < BOUND_BYTES, f"peak grew {growth >> 20} MiB reading a {size >> 20} MiB trace"
