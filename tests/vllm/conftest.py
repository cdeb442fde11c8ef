"""Shared fixtures of the real-vLLM tier (`make vllm` builds what they need; docs/VLLM.md).

- `VLLM_PYTHON`, `MODELS`, `TEMPLATE`: the vLLM venv's interpreter, its tiny model folders
  (`tiny-llama`, `tiny-mla`) and the vLLM source repo every target clones (tools/vllm/target.py).
- `vllm_target(folder, model=..., flags=..., profile=..., extra_toml=...)` (fixture `vllm_target`):
  a target directory, i.e. a clone of the source repo at `folder/vllm` and `folder/target.toml`.
- `launch_vllm(repo, argv, log)`: a vLLM server started through the door's `server.launch` like
  the loop does (ready after a real completion); stop it with `stop_vllm(handle)`.
- `llama_server` (module scope): one tiny-Llama server (eager, `--max-num-seqs 2`, float32, API profiler on)
  launched from its own clone, for the tests of a module that only read from it; `(handle, repo,
  traces)`.

Every file here that starts a server sets `pytestmark = pytest.mark.xdist_group("vllm")`: `make
test` (`--dist loadgroup`, tests/conftest.py) then runs them all on one worker, one after another.
A vLLM server is ~3 GB RSS and ~32 s to start on 2 idle cores (eager, its worker in the EngineCore
process: tools/vllm/target.py): launch as few as possible, start those a test needs together, and
never leave one running (the suite's guard kills what a test leaves in its tmp_path and fails it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from state.config.target import LaunchConfig
from state.door.calls import LaunchArgs, ServerArgs
from state.engines.process import ServerHandle
from tools import server
from tools.vllm.checkout import clone
from tools.vllm.engine import STARTED_LOG as VLLM_STARTED_LOG
from tools.vllm.target import MODELS, PYTHON, SERVE_ENV, TEMPLATE, serve_argv, write_target

VLLM_PYTHON = PYTHON
CHECKOUT_VERSION = "0.32.0+checkout"
"""`__version__` in `llama_server`'s clone: its `/version` proves the server imports the checkout."""
__all__ = ["CHECKOUT_VERSION", "MODELS", "TEMPLATE", "VLLM_PYTHON", "launch_vllm", "stop_vllm"]


def _need_venv() -> None:
    if not (VLLM_PYTHON.exists() and (TEMPLATE / ".git").is_dir() and (MODELS / "tiny-mla").is_dir()):
        pytest.fail(
            f"the vLLM venv is not built ({VLLM_PYTHON.parent.parent}); run `make vllm`", pytrace=False
        )


def launch_vllm(repo: Path, argv: list[str], log: Path, startup_timeout_s: float = 600) -> ServerHandle:
    """A vLLM server of `repo` started with `argv` through `server.launch`, ready (health, then a
    one-token completion); stop it with `stop_vllm`."""
    launch = LaunchConfig(
        argv=argv,
        env=dict(SERVE_ENV),
        startup_timeout_s=startup_timeout_s,
        stop_grace_s=20,
        ready_completion=True,
        started_log=VLLM_STARTED_LOG,
    )
    args = LaunchArgs(
        repo=repo,
        launch=launch,
        python=str(VLLM_PYTHON),
        log_path=log,
        tree_sha256="t",
        instrumented=False,
        profile_dir=None,
        launch_number=1,
    )
    return server.launch(args)


def stop_vllm(handle: ServerHandle) -> None:
    """Stop the server's whole process group (API server and EngineCore): SIGTERM, then SIGKILL."""
    server.stop(ServerArgs(server=handle, grace_s=20))


@pytest.fixture
def vllm_target() -> Callable[..., Path]:
    """`write_target` of tools/vllm/target.py, after checking `make vllm` ran."""
    _need_venv()
    return write_target


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerHandle, Path, Path]]:
    """One tiny-Llama server for a module: (handle, its repo, its trace folder); stopped after."""
    _need_venv()
    folder = tmp_path_factory.mktemp("llama-server")
    repo = clone(TEMPLATE, folder / "vllm")
    version = repo / "vllm" / "_version.py"  # an uncommitted edit: GET /version shows which vllm runs
    version.write_text(version.read_text().replace("'0.32.0'", f"'{CHECKOUT_VERSION}'"))
    traces = folder / "vllm-traces"
    argv = serve_argv(
        VLLM_PYTHON,
        MODELS / "tiny-llama",
        "tiny-llama",
        "--enforce-eager",
        "--max-num-seqs",
        "2",
        "--dtype",
        "float32",  # bf16 takes the AMX attention path: SIGILL in this VM (AMX not granted)
        profile_dir=traces,
    )
    handle = launch_vllm(repo, argv, folder / "server.log")
    try:
        yield handle, repo, traces
    finally:
        stop_vllm(handle)
