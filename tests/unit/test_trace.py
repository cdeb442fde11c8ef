"""tools.trace on real torch.profiler output: traces this test records, and ones recorded on an H200."""

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from tools.errors import TraceError
from tools.trace import read_chrome_trace, read_key_averages_table

TRACES = Path(__file__).parents[1] / "data" / "traces"
POOL_SLOTS = 8192
ACTIVE_TOKENS = 100


def write_trace(folder: Path, events: list[dict]) -> Path:
    """A Chrome trace file holding `events`, as torch.profiler writes them."""
    path = folder / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def full_pool_cast(pool: torch.Tensor) -> None:
    """One decode step of the reference bug: every layer casts the whole FP8 pool to BF16."""
    for _ in range(3):
        pool.to(torch.bfloat16)[:ACTIVE_TOKENS].sum()


def gather_then_cast(pool: torch.Tensor) -> None:
    """The fixed step: gather the active rows, cast only those."""
    rows = torch.arange(ACTIVE_TOKENS)
    for _ in range(3):
        pool[rows].to(torch.bfloat16).sum()


MATMUL = (torch.ones(128, 1024), torch.ones(1024, 1024), torch.ones(1024))


def matmul_heavy(pool: torch.Tensor) -> None:
    """A step dominated by dense matrix products."""
    a, w, b = MATMUL
    for _ in range(3):
        torch.addmm(b, a, w)
        torch.mm(a, w)


def record_trace(
    path: Path, step: Callable[[torch.Tensor], None], steps: int = 2, with_stack: bool = False
) -> str:
    """Profile `steps` decode steps (after one warm-up) on CPU; export the Chrome trace to `path`.

    Returns the key_averages table grouped by input shape. torch allows one export per trace."""
    pool = torch.zeros(POOL_SLOTS, 1, 576, dtype=torch.float8_e4m3fn)
    tables: list[str] = []

    def ready(prof: profile) -> None:
        """Export the trace and keep the table (on_trace_ready, once the active steps end)."""
        prof.export_chrome_trace(str(path))
        tables.append(
            prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=20)
        )

    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        on_trace_ready=ready,
        with_stack=with_stack,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
    ) as prof:
        for _ in range(steps + 1):
            with record_function("forward_decode"):
                step(pool)
            prof.step()
    return tables[0]


def recorded_table(name: str) -> str:
    """A key_averages table recorded on an H200 beside its trace (see make_cuda_traces.py)."""
    return gzip.decompress((TRACES / f"{name}.key_averages.txt.gz").read_bytes()).decode()


@pytest.fixture(scope="module")
def cast_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A gzipped CPU trace of the full-pool cast, and its key_averages table."""
    path = tmp_path_factory.mktemp("cast") / "t.json.gz"
    return path, record_trace(path, full_pool_cast)


def test_cpu_trace_groups_ops_by_name_and_dims(cast_trace: tuple[Path, str]) -> None:
    summary = read_chrome_trace(cast_trace[0])
    top = summary.ops[0]
    assert (summary.time_basis, summary.steps) == ("cpu", 2)
    assert top.name == "aten::copy_" and top.calls == 6
    assert top.input_dims == [[POOL_SLOTS, 1, 576], [POOL_SLOTS, 1, 576], []]
    assert top.input_types[:2] == ["c10::BFloat16", "c10::Float8_e4m3fn"]
    assert top.share > 0.5 and top.total_us >= top.self_us
    assert [op.self_us for op in summary.ops] == sorted((op.self_us for op in summary.ops), reverse=True)
    assert sum(op.share for op in summary.ops) == pytest.approx(1.0)
    assert summary.step_us == pytest.approx(summary.total_self_us / 2)
    names = {op.name for op in summary.ops}
    assert "forward_decode" not in names and not any(n.startswith("ProfilerStep") for n in names)


def test_plain_json_and_steps_given(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    record_trace(path, full_pool_cast, steps=3)
    assert read_chrome_trace(path).steps == 3
    assert read_chrome_trace(str(path), steps=7).steps == 7


def test_steps_from_outermost_forward_decode(tmp_path: Path) -> None:
    pool = torch.zeros(64, 1, 576, dtype=torch.float8_e4m3fn)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            with record_function("forward_decode"), record_function("inner.forward_decode"):
                full_pool_cast(pool)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    assert read_chrome_trace(tmp_path / "t.json").steps == 3


def test_device_trace_attributes_kernels_to_launching_op() -> None:
    """Recorded on an H200 by tests/data/traces/make_cuda_traces.py; key_averages of the same run."""
    summary = read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz")
    table = read_key_averages_table(recorded_table("full_pool_cast_cuda"))
    by_op = {(op.name, str(op.input_dims)): op for op in table}
    assert (summary.time_basis, summary.steps) == ("device", 3)
    assert summary.total_self_us == pytest.approx(1624, abs=1)
    for op in summary.ops[:5]:
        assert op.self_us == pytest.approx(by_op[(op.name, str(op.input_dims))].self_us, abs=0.5)
    to = next(op for op in summary.ops if op.name == "aten::to")
    assert to.self_us == 0 and to.total_us == pytest.approx(summary.ops[0].self_us)


def test_kernel_launched_outside_any_op_keeps_its_name(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cuLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10.0,
            "dur": 2.0,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "triton_fused_rope",
            "pid": 0,
            "tid": 7,
            "ts": 20.0,
            "dur": 5.0,
            "args": {"correlation": 7},
        },
    ]
    summary = read_chrome_trace(write_trace(tmp_path, events))
    rows = [(op.name, op.calls, op.self_us, op.share) for op in summary.ops]
    assert rows == [("triton_fused_rope", 1, 5.0, 1.0)]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "file is empty"),
        (b'{"traceEvents": [{"ph": "X",', "invalid JSON at byte offset 28"),
        (b"[1, 2]", "expected a JSON object with a 'traceEvents' list"),
        (
            gzip.compress(b'{"traceEvents": []}', mtime=0)[:-12],
            "gzip data is truncated or corrupt",
        ),  # mtime=0: the same test id in every xdist worker
    ],
)
def test_malformed_trace_names_file_and_problem(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=expected) as err:
        read_chrome_trace(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_truncated_real_gzip_and_missing_file(cast_trace: tuple[Path, str], tmp_path: Path) -> None:
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(cast_trace[0].read_bytes()[:2000])
    with pytest.raises(TraceError, match="truncated"):
        read_chrome_trace(cut)
    with pytest.raises(TraceError, match="cannot read"):
        read_chrome_trace(tmp_path / "absent.json.gz")


GLM5_TABLE = """\
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------
                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg     Self CUDA   Self CUDA %    CUDA total  CUDA time avg    # of Calls                             Input Shapes
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------
                                            aten::copy_         1.12%     310.512ms         2.05%     568.377ms     132.563us        1.337s        69.00%        1.337s     571.444us          2340  [[495552, 1, 576], [495552, 1, 576], []]
void at::native::unrolled_elementwise_kernel<at::nat...         0.00%       0.000us         0.00%       0.000us       0.000us        1.337s        69.00%        1.337s     571.444us          2340                                       []
                                        aten::_to_copy         0.41%     113.704ms         2.71%     751.420ms     321.120us       0.000us         0.00%        1.337s     571.444us          2340   [[495552, 1, 576], [], [], [], [], [], []]
                                    cutlass_fp4_gemm_sm120         0.00%       0.000us         0.00%       0.000us       0.000us     213.117ms        11.00%     213.117ms      15.180us         14040                                       []
                                               aten::mm         0.37%     102.410ms         0.91%     252.061ms      17.953us      96.871ms         5.00%      96.871ms       6.900us         14040            [[1, 6144], [6144, 2048]]
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------
Self CPU time total: 27.726s
Self CUDA time total: 1.938s
"""


def test_glm5_cuda_table_uses_device_columns() -> None:
    ops = read_key_averages_table(GLM5_TABLE)
    copy = ops[0]
    assert (copy.name, copy.calls, copy.share) == ("aten::copy_", 2340, 0.69)
    assert copy.self_us == pytest.approx(1.337e6) and copy.total_us == pytest.approx(1.337e6)
    assert copy.input_dims == [[495552, 1, 576], [495552, 1, 576], []]
    assert ops[1].input_dims == [] and ops[1].name.endswith("...")
    assert ops[4].self_us == pytest.approx(96871) and ops[4].input_dims == [[1, 6144], [6144, 2048]]


def test_table_recorded_on_h200() -> None:
    ops = read_key_averages_table(recorded_table("gather_then_cast_cuda"))
    copy = next(op for op in ops if op.name == "aten::copy_")
    assert copy.input_dims == [[100, 1, 576], [100, 1, 576], []] and copy.calls == 12


def test_table_produced_by_torch(cast_trace: tuple[Path, str]) -> None:
    ops = read_key_averages_table(cast_trace[1])
    assert all(not op.name.startswith("ProfilerStep") for op in ops)
    copy = next(op for op in ops if op.name == "aten::copy_")
    assert copy.calls == 6 and copy.input_dims == [[POOL_SLOTS, 1, 576], [POOL_SLOTS, 1, 576], []]
    assert 0.5 < copy.share <= 1 and copy.total_us >= copy.self_us > 0


def test_table_without_shapes() -> None:
    pool = torch.zeros(64, 1, 576, dtype=torch.float8_e4m3fn)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        full_pool_cast(pool)
    ops = read_key_averages_table(prof.key_averages().table(sort_by="self_cpu_time_total"))
    assert "aten::copy_" in {op.name for op in ops} and all(op.input_dims == [] for op in ops)


def test_table_missing_columns_and_truncation() -> None:
    lines = GLM5_TABLE.splitlines()
    no_calls = "\n".join(line.replace("# of Calls", "  Whatever") for line in lines)
    with pytest.raises(TraceError, match="lacks column.*# of Calls"):
        read_key_averages_table(no_calls, source="glm5.txt")
    with pytest.raises(TraceError, match="glm5.txt: expected a key_averages table"):
        read_key_averages_table("\n".join(lines[:5]), source="glm5.txt")
    with pytest.raises(TraceError, match="line 4: expected a time"):
        read_key_averages_table(GLM5_TABLE.replace("1.337s ", "1.337xx", 1))
    with pytest.raises(TraceError, match="expected a key_averages table"):
        read_key_averages_table("")
