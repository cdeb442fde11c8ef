"""`perfloop analyze | diagnose | diff` through the real CLI (Typer runner, real traces)."""

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from agent.cli import app

from .test_trace import TRACES, full_pool_cast, record_trace

FULL = str(TRACES / "full_pool_cast_cuda.json.gz")
FIXED = str(TRACES / "gather_then_cast_cuda.json.gz")
runner = CliRunner()


def run_json(*args: str) -> dict:
    """Run a command with --json; its stdout parsed."""
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_analyze_ops_json() -> None:
    doc = run_json("analyze", FULL, "--top", "3")
    assert doc["time_basis"] == "device" and doc["total_device_us"] == doc["total_self_us"] > 1600
    assert [op["name"] for op in doc["ops"]][:1] == ["aten::copy_"] and len(doc["ops"]) == 3
    top = doc["ops"][0]
    assert top["input_dims"][0] == [65536, 1, 576] and top["calls"] == 12
    assert abs(top["share"] - top["self_device_us"] / doc["total_device_us"]) < 1e-9
    assert doc["device_activity"]["launch_bound"] is False and doc["steps"] == 3


def test_analyze_by_kernel_and_rank_directory(tmp_path: Path) -> None:
    for rank in range(2):
        shutil.copy(FULL, tmp_path / f"x-TP-{rank}.trace.json.gz")
    doc = run_json("analyze", str(tmp_path), "--by", "kernel")
    assert doc["ops"][0]["name"].startswith("void at::native::unrolled_elementwise_kernel")
    assert doc["ops"][0]["calls"] == 24 and len(doc["ranks"]) == 2
    assert abs(sum(row["share"] for row in doc["ops"]) - 1) < 1e-9
    assert doc["total_device_us"] == sum(row["self_device_us"] for row in doc["ops"])


def test_analyze_cpu_trace_table_output(tmp_path: Path) -> None:
    """The table shows the same ops, in the same order, with the same numbers as `--json`."""
    trace = str(tmp_path / "t.json")
    record_trace(tmp_path / "t.json", full_pool_cast)
    doc = run_json("analyze", trace)
    result = runner.invoke(app, ["analyze", trace], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    per_step = f"{doc['steps']} steps, {doc['step_us'] / 1000:.3f} ms cpu time per step"
    head = next(i for i, ln in enumerate(lines) if ln.startswith("share  "))  # the header row
    title = " ".join(line.strip() for line in lines[:head])
    assert title == f"{trace}: {per_step}"  # the title, left, above the table (piped: plain columns)
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[head + 1 :] if re.match(r"\d+\.\d%  ", line)]
    expected = [
        [f"{op['share']:.1%}", f"{op['self_us'] / doc['steps'] / 1000:.3f}", str(op["calls"]), op["name"]]
        for op in doc["ops"]
    ]
    assert [row[:4] for row in rows] == expected
    assert expected[0][3] == "aten::copy_" and rows[0][4] == "[[8192, 1, 576], [8192, 1, 576], []]"


def test_diagnose_json_ranked_with_evidence() -> None:
    doc = run_json("diagnose", FULL, "--active-tokens", "100", "--tpot-ms", "10")
    first = doc["findings"][0]
    assert first["playbook"] == "kv-cache-full-pool-cast" and first["confidence"] == 0.9
    assert abs(first["expected_gain_ms"] - 10 * first["expected_gain_share"]) < 1e-9
    assert first["evidence"][0]["op"] == "aten::copy_" and "roofline" in first
    fixed = run_json("diagnose", FIXED)
    assert fixed["findings"][0]["playbook"] == "launch-bound-decode"


def test_diff_and_errors(tmp_path: Path) -> None:
    doc = run_json("diff", FULL, FIXED)
    assert doc["ops"][0]["status"] == "vanished"
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X"')
    for args, message in (
        (
            ["analyze", str(bad)],
            f"{bad}: invalid JSON at byte offset 27 (input data was truncated); "
            "the trace is truncated or not a Chrome trace",
        ),
        (["analyze", FULL, "--by", "thread"], "--by must be op or kernel, not 'thread'"),
        (
            ["diff", FULL, str(tmp_path / "no")],
            f"{tmp_path / 'no'}: cannot read the trace (no such file or directory); check the path",
        ),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and result.output == f"error: {message}\n", result.output
