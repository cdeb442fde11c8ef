"""The profiler hook program (tools/workspace/profiler_hook.py), run in this process on CPU.

tests/integration/test_instrumentation.py runs it inside an instrumented file in a subprocess;
these tests call the function directly, one behaviour each.
"""

import ast
import json
from pathlib import Path

import pytest
import torch

from tools.workspace.instrumentation import HOOK_FILE, hook_text
from tools.workspace.profiler_hook import _perfloop_profiled


def decode(x: torch.Tensor) -> torch.Tensor:
    """A stand-in decode step."""
    return (x @ x.T).sum(dim=0)


def request(folder: Path, run_id: str = "r1", warmup: int = 1, active: int = 2) -> None:
    (folder / "request.json").write_text(
        json.dumps({"id": run_id, "warmup_steps": warmup, "active_steps": active})
    )


@pytest.fixture
def armed(tmp_path, monkeypatch):
    """`decode` decorated with PERFLOOP_PROFILE_DIR set to tmp_path."""
    monkeypatch.setenv("PERFLOOP_PROFILE_DIR", str(tmp_path))
    return _perfloop_profiled(decode)


def test_the_file_holds_only_the_hook_so_the_inserted_text_is_the_whole_program():
    body = ast.parse(HOOK_FILE.read_text()).body
    assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)  # docstring
    assert [type(n) for n in body[1:]] == [ast.FunctionDef] and isinstance(body[1], ast.FunctionDef)
    assert body[1].name == "_perfloop_profiled"
    text = hook_text()
    assert text.startswith("def _perfloop_profiled(fn):\n") and text.endswith("    return wrapper\n\n")
    namespace: dict = {}
    exec(compile(text, "hook", "exec"), namespace)  # runs alone, as it does above the target's class
    assert set(namespace) - {"__builtins__"} == {"_perfloop_profiled"}


def test_dormant_without_the_env_var(monkeypatch):
    monkeypatch.delenv("PERFLOOP_PROFILE_DIR", raising=False)
    assert _perfloop_profiled(decode) is decode


def test_armed_wrapper_passes_calls_through_and_keeps_the_name(armed, tmp_path):
    x = torch.randn(4, 8)
    assert torch.equal(armed(x), decode(x))
    assert armed.__name__ == "decode" and armed.__wrapped__ is decode
    assert armed.__module__ == decode.__module__ and armed.__doc__ == decode.__doc__
    assert list(tmp_path.iterdir()) == []  # no request: nothing written


def test_a_request_profiles_warmup_plus_active_calls_then_stops(armed, tmp_path):
    request(tmp_path, "r1", warmup=1, active=2)
    for _ in range(5):
        armed(torch.randn(4, 8))
    out = tmp_path / "r1"
    done = json.loads((out / "done.json").read_text())
    assert done == {
        "id": "r1",
        "steps": 2,
        "device": "cpu",
        "trace": str(out / "trace.json.gz"),
        "summary": str(out / "summary.txt"),
    }
    assert (tmp_path / "request.r1.claimed").exists() and not (tmp_path / "request.json").exists()
    assert "Self CPU" in (out / "summary.txt").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["done.json", "summary.txt", "trace.json.gz"]


def test_a_second_request_after_the_first_starts_a_second_run(armed, tmp_path):
    for run_id in ("a", "b"):
        request(tmp_path, run_id, warmup=1, active=1)
        armed(torch.randn(2, 2))
        armed(torch.randn(2, 2))
    assert (tmp_path / "a" / "done.json").exists() and (tmp_path / "b" / "done.json").exists()


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"id": "../up", "warmup_steps": 1, "active_steps": 1}, "ValueError: bad request"),
        ({"id": "r", "warmup_steps": 1, "active_steps": 0}, "ValueError: bad request"),
        ({"id": "r"}, "KeyError: 'warmup_steps'"),
    ],
)
def test_a_bad_request_goes_to_error_txt_and_the_call_goes_on(armed, tmp_path, spec, message):
    (tmp_path / "request.json").write_text(json.dumps(spec))
    x = torch.randn(3, 3)
    assert torch.equal(armed(x), decode(x))
    assert (tmp_path / "error.txt").read_text().startswith(message)
    assert not (tmp_path / "request.json").exists()  # claimed, so it is not retried every step
    request(tmp_path, "ok", warmup=1, active=1)  # and the hook still serves the next request
    armed(x)
    armed(x)
    assert (tmp_path / "ok" / "done.json").exists()


def test_rank_zero_of_an_initialized_process_group_claims_the_request(armed, tmp_path):
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        request(tmp_path, warmup=1, active=1)
        armed(torch.randn(2, 2))
        armed(torch.randn(2, 2))
    finally:
        torch.distributed.destroy_process_group()
    assert (tmp_path / "r1" / "done.json").exists()
