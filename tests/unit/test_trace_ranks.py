"""`perfloop analyze` on the eight rank traces of a tensor-parallel server: each rank's table, the
slowest rank, each rank's wait in collectives. The ranks are a real H200 trace (the glm5 demo under
CUDA graphs) with an NCCL all-reduce every 24 kernels, one rank's kernels 15% slower
(benchmarks/h200_traces.py, the benchmark's TP8 set, at one copy of the trace per rank)."""

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests/data/traces/served/h200-graphs-hook.json.gz"
SLOW = 5
runner = CliRunner()


def _maker():  # benchmarks/ is not a package: load the benchmark's trace maker by path
    spec = importlib.util.spec_from_file_location("h200_traces", ROOT / "benchmarks/h200_traces.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compute_us_per_step(trace: str) -> float:
    """A rank's compute kernel time per step (every kernel but the all-reduces), read on its own."""
    result = runner.invoke(app, ["analyze", trace, "--by", "kernel", "--top", "1000", "--json"])
    assert result.exit_code == 0, result.output
    one = json.loads(result.stdout)
    assert "rank_tables" not in one  # one file: the document as before
    return sum(r["self_device_us"] for r in one["ops"] if "AllReduce" not in r["name"]) / one["steps"]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tp8")
    maker = _maker()
    for rank in range(8):
        maker.tile(folder / f"server-TP-{rank}.trace.json", 1, rank, 8, SLOW, SOURCE)
    return folder


def test_eight_ranks_each_table_the_slowest_and_each_wait(ranks: Path) -> None:
    result = runner.invoke(app, ["analyze", str(ranks), "--by", "kernel", "--top", "5", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    tables = doc["rank_tables"]
    assert [t["rank"] for t in tables] == list(range(8)) and len(doc["ranks"]) == 8
    assert all(t["source"].endswith(f"server-TP-{n}.trace.json") for n, t in enumerate(tables))
    assert all(len(t["ops"]) == 5 and t["steps"] == 5 for t in tables)
    slow = doc["slowest_rank"]
    assert slow["rank"] == SLOW and slow["source"] == tables[SLOW]["source"]
    # the slow rank waits for no one; every other rank waits in the all-reduces for the time the
    # slow rank's compute kernels took beyond its own (15% of them)
    assert tables[SLOW]["collective_wait_us_per_step"] == 0
    compute = _compute_us_per_step(tables[0]["source"])  # the ranks but the slow one are alike
    top = next(r["name"] for r in tables[SLOW]["ops"] if "AllReduce" not in r["name"])
    for n, t in enumerate(tables):
        assert next(r["name"] for r in t["ops"] if "AllReduce" not in r["name"]) == top
        if n != SLOW:
            assert t["collective_wait_us_per_step"] == pytest.approx(0.15 * compute, rel=0.05)
    assert slow["others_wait_us_per_step"] == max(t["collective_wait_us_per_step"] for t in tables)
    assert slow["work_us_per_step"] == max(t["work_us_per_step"] for t in tables)


def test_eight_ranks_table_names_the_slowest(ranks: Path) -> None:
    result = runner.invoke(app, ["analyze", str(ranks), "--by", "kernel"], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│") and "TP-" in line]
    assert [row.split("│")[1].strip() for row in rows] == [str(n) for n in range(8)]
    assert f"slowest rank: {SLOW} ({ranks / f'server-TP-{SLOW}.trace.json'})" in result.stdout
