"""tools.trace.compare.diff on the committed H200 traces and on CPU traces recorded here."""

from pathlib import Path

from tools.trace import read_chrome_trace
from tools.trace.compare.diff import diff_profiles

from .test_trace import TRACES, full_pool_cast, gather_then_cast, record_trace


def test_fix_makes_the_pool_cast_vanish_on_h200() -> None:
    before = read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz")
    after = read_chrome_trace(TRACES / "gather_then_cast_cuda.json.gz")
    result = diff_profiles(before, after)
    first = result.ops[0]
    assert (first.name, first.status, first.input_dims[0]) == ("aten::copy_", "vanished", [65536, 1, 576])
    assert first.delta_us_per_step == -first.before_us_per_step
    appeared = next(r for r in result.ops if r.status == "appeared" and r.name == "aten::copy_")
    assert appeared.input_dims[0] == [100, 1, 576]
    assert all(r.status != "same" for r in result.ops) and result.note == ""
    assert result.before_step_us > 5 * result.after_step_us
    assert [abs(r.delta_us_per_step) for r in result.ops] == sorted(
        (abs(r.delta_us_per_step) for r in result.ops), reverse=True
    )


def test_same_trace_has_no_changes_and_bases_are_checked(tmp_path: Path) -> None:
    record_trace(tmp_path / "a.json.gz", full_pool_cast)
    record_trace(tmp_path / "b.json.gz", gather_then_cast)
    cpu = read_chrome_trace(tmp_path / "a.json.gz")
    assert diff_profiles(cpu, cpu).ops == []
    shrank = diff_profiles(cpu, read_chrome_trace(tmp_path / "b.json.gz"))
    assert any(r.status == "vanished" and r.name == "aten::copy_" for r in shrank.ops)
    mixed = diff_profiles(cpu, read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz"))
    assert "time bases differ (cpu vs device)" in mixed.note
